-- What each decider reports of itself with its pulls (DeciderHealth): its Redis breaker,
-- engine errors, and the decision events waiting for Kafka or dropped.
ALTER TABLE deciders ADD COLUMN health jsonb NOT NULL DEFAULT '{}';
