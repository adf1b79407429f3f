-- Top clients' counts past analytics.MaxClientCount (2^49) held at it.
-- Only rejections claiming costs beyond any limit could pass it, before
-- each event counted at most the largest limit (10^9); sums of such
-- counts could wrap past a bigint and fail every commit of a partition
-- from then on. An hour's row held at the bound passes its loss on to its
-- day through the update trigger; a day whose hours were pruned is held at
-- a day of hours at the bound (24 × 2^49).
UPDATE analytics_top_clients
SET rejected = 562949953421312, error = least(error, 562949953421311)
WHERE rejected > 562949953421312;

UPDATE analytics_top_clients_day
SET rejected = 13510798882111488, error = least(error, 13510798882111487)
WHERE rejected > 13510798882111488;
