package analytics

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultHourRetention is how long hourly rollups are kept by default:
// the longest range a report answers (reports.MaxRange).
const DefaultHourRetention = 400 * 24 * time.Hour

// DefaultTopK is how many clients each top-clients group tracks.
const DefaultTopK = 100

// Store writes rollups and consumer offsets to PostgreSQL (the tables of
// migration 000002).
type Store struct {
	pool *pgxpool.Pool
	topK int
}

// NewStore returns a Store tracking topK clients per top-clients group
// (0 means DefaultTopK).
func NewStore(pool *pgxpool.Pool, topK int) *Store {
	if topK <= 0 {
		topK = DefaultTopK
	}
	return &Store{pool: pool, topK: topK}
}

// ErrFenced is returned by Commit when the partition's stored offset is not
// the one the batch started from: another consumer committed it first, and
// this one must re-read from the stored offset.
var ErrFenced = errors.New("analytics: partition offset moved; another consumer committed it")

// Offset returns the next offset to read of a partition, or -1 when the
// group has committed none.
func (s *Store) Offset(ctx context.Context, group, topic string, partition int) (int64, error) {
	var next int64
	err := s.pool.QueryRow(ctx, `SELECT next_offset FROM analytics_offsets WHERE group_id = $1 AND topic = $2 AND partition = $3`,
		group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("analytics: read offset: %w", err)
	}
	return next, nil
}

// Marks returns the partition's committed marks (see Batch): the batch
// read from its stored offset starts after them.
func (s *Store) Marks(ctx context.Context, group, topic string, partition int) (Marks, error) {
	rows, err := s.pool.Query(ctx, `SELECT producer, last_seq FROM analytics_producers
		WHERE group_id = $1 AND topic = $2 AND partition = $3`, group, topic, partition)
	if err != nil {
		return nil, fmt.Errorf("analytics: read marks: %w", err)
	}
	marks := Marks{}
	var producer string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&producer, &seq}, func() error {
		marks[producer] = uint64(seq)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("analytics: read marks: %w", err)
	}
	return marks, nil
}

// Commit adds b's rollups, moves the partition's offset from from (-1:
// none committed) to next and stores b's marks, in one transaction: either
// all of it lands or none. When the stored offset is not from, nothing is
// written and the error is ErrFenced.
func (s *Store) Commit(ctx context.Context, group, topic string, partition int, from, next int64, b *Batch) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tag interface{ RowsAffected() int64 }
		var err error
		if from < 0 {
			tag, err = tx.Exec(ctx, `INSERT INTO analytics_offsets (group_id, topic, partition, next_offset)
				VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, group, topic, partition, next)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE analytics_offsets SET next_offset = $5, updated_at = now()
				WHERE group_id = $1 AND topic = $2 AND partition = $3 AND next_offset = $4`, group, topic, partition, from, next)
		}
		if err != nil {
			return fmt.Errorf("analytics: commit offset: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return ErrFenced
		}
		if err := writeMinutes(ctx, tx, b); err != nil {
			return err
		}
		if err := writeMarks(ctx, tx, group, topic, partition, b.next); err != nil {
			return err
		}
		return s.writeTop(ctx, tx, b)
	})
}

func writeMarks(ctx context.Context, tx pgx.Tx, group, topic string, partition int, marks Marks) error {
	if len(marks) == 0 {
		return nil
	}
	producers, seqs := make([]string, 0, len(marks)), make([]int64, 0, len(marks))
	for p, seq := range marks {
		producers, seqs = append(producers, p), append(seqs, int64(seq)) // Decode bounds seq to int64
	}
	if _, err := tx.Exec(ctx, `INSERT INTO analytics_producers AS p (group_id, topic, partition, producer, last_seq)
		SELECT $1, $2, $3, * FROM unnest($4::text[], $5::bigint[])
		ON CONFLICT (group_id, topic, partition, producer) DO UPDATE SET
			last_seq = greatest(p.last_seq, excluded.last_seq), seen_at = now()`,
		group, topic, partition, producers, seqs); err != nil {
		return fmt.Errorf("analytics: write marks: %w", err)
	}
	return nil
}

func writeMinutes(ctx context.Context, tx pgx.Tx, b *Batch) error {
	if len(b.minutes) == 0 {
		return nil
	}
	n := len(b.minutes)
	tenants, tiers, rules, regions := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	minutes := make([]time.Time, 0, n)
	var cols [6][]int64
	// In one order, so that the transactions of two partitions that hold
	// one tenant's events (for a while after partitions are added to the
	// topic) lock the rows they share, and their hours' through the
	// trigger, in the same order: no deadlock.
	keys := slices.SortedFunc(maps.Keys(b.minutes), func(a, b minuteKey) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.minute, b.minute), cmp.Compare(a.tier, b.tier), cmp.Compare(a.rule, b.rule),
			cmp.Compare(a.region, b.region))
	})
	for _, k := range keys {
		c := b.minutes[k]
		tenants, tiers, rules, regions = append(tenants, k.tenant), append(tiers, k.tier), append(rules, k.rule), append(regions, k.region)
		minutes = append(minutes, time.Unix(k.minute, 0).UTC())
		for i, v := range [6]int64{c.allowed, c.rejected, c.shadow, c.rejectionEvents, c.shadowEvents, c.dropped} {
			cols[i] = append(cols[i], v)
		}
	}
	// A trigger adds each minute's gain to its hour's row (migrations 25
	// and 36). A row is one region's.
	_, err := tx.Exec(ctx, `INSERT INTO analytics_minute AS m (tenant_id, minute, tier, rule_id, allowed, rejected,
			shadow_rejected, rejection_events, shadow_events, dropped_rejections, region)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[], $6::bigint[],
			$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[])
		ON CONFLICT (tenant_id, minute, tier, rule_id, region) DO UPDATE SET
			allowed = m.allowed + excluded.allowed, rejected = m.rejected + excluded.rejected,
			shadow_rejected = m.shadow_rejected + excluded.shadow_rejected,
			rejection_events = m.rejection_events + excluded.rejection_events,
			shadow_events = m.shadow_events + excluded.shadow_events,
			dropped_rejections = m.dropped_rejections + excluded.dropped_rejections`,
		tenants, minutes, tiers, rules, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], regions)
	if err != nil {
		return fmt.Errorf("analytics: write minute rollups: %w", err)
	}
	return nil
}

// writeTop merges the batch's rejected clients into the stored top-clients
// groups: read the groups it touches, merge, and write them back.
func (s *Store) writeTop(ctx context.Context, tx pgx.Tx, b *Batch) error {
	if len(b.clients) == 0 {
		return nil
	}
	var tenants, rules []string
	var hours []time.Time
	for g := range b.clients {
		tenants, rules, hours = append(tenants, g.tenant), append(rules, g.rule), append(hours, time.Unix(g.hour, 0).UTC())
	}
	// Writing a group of a summed day writes its day's rows too (migration
	// 27's trigger), which another partition's commit may write in another
	// order: writers of a tenant's day take turns, locking the days in one
	// order.
	days := make([]int32, 0, len(b.clients))
	for g := range b.clients {
		days = append(days, dayLock(g.tenant, g.hour))
	}
	slices.Sort(days)
	// Then, before the groups are read, the lock that SumDays and the
	// pruning of hours take exclusively (and the trigger shared): hours
	// pruned between the read and the write would come back whole, their
	// old counts in their days twice (migration 29 keeps the days of hours
	// pruned). One statement: the outer lock is taken once the inner ones
	// are all held.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($3, 0)
		FROM (SELECT count(pg_advisory_xact_lock($1, k)) FROM unnest($2::integer[]) AS k) AS days`,
		dayLockClass, slices.Compact(days), daysLockClass); err != nil {
		return fmt.Errorf("analytics: lock top clients' days: %w", err)
	}
	// The groups are read, merged and written back by one transaction at a
	// time: every group's rejections count in its hour's rollup row, which
	// writeMinutes' trigger has locked until the commit (in one order).
	rows, err := tx.Query(ctx, `SELECT t.tenant_id, t.rule_id, t.hour, t.client_key, t.rejected, t.error
		FROM analytics_top_clients t JOIN unnest($1::text[], $2::text[], $3::timestamptz[]) AS g (tenant_id, rule_id, hour)
		USING (tenant_id, rule_id, hour)`, tenants, rules, hours)
	if err != nil {
		return fmt.Errorf("analytics: read top clients: %w", err)
	}
	tracked := map[groupKey][]counter{}
	var g groupKey
	var hour time.Time
	var c counter
	_, err = pgx.ForEachRow(rows, []any{&g.tenant, &g.rule, &hour, &c.client, &c.rejected, &c.error}, func() error {
		g.hour = hour.Unix()
		tracked[g] = append(tracked[g], c)
		return nil
	})
	if err != nil {
		return fmt.Errorf("analytics: read top clients: %w", err)
	}
	// Write back only what moved: the batch's clients (added to, or new)
	// and the evicted ones.
	type topRows struct {
		tenants, rules, clients []string
		hours                   []time.Time
		rejected, errs          []int64
	}
	var ins, upd topRows
	var gone struct {
		tenants, rules, clients []string
		hours                   []time.Time
	}
	for g, batch := range b.clients {
		hour := time.Unix(g.hour, 0).UTC()
		before := tracked[g]
		had := make(map[string]bool, len(before))
		for _, c := range before {
			had[c.client] = true
		}
		after := mergeTop(slices.Clone(before), batch, s.topK)
		for _, c := range after {
			up := &ins
			if had[c.client] {
				up = &upd
			}
			delete(had, c.client)
			if _, moved := batch[c.client]; moved {
				up.tenants, up.rules, up.hours = append(up.tenants, g.tenant), append(up.rules, g.rule), append(up.hours, hour)
				up.clients, up.rejected, up.errs = append(up.clients, c.client), append(up.rejected, c.rejected), append(up.errs, c.error)
			}
		}
		for c := range had {
			gone.tenants, gone.rules, gone.hours, gone.clients = append(gone.tenants, g.tenant), append(gone.rules, g.rule), append(gone.hours, hour), append(gone.clients, c)
		}
	}
	if len(gone.clients) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM analytics_top_clients t
			USING unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS g (tenant_id, rule_id, hour, client_key)
			WHERE (t.tenant_id, t.rule_id, t.hour, t.client_key) = (g.tenant_id, g.rule_id, g.hour, g.client_key)`,
			gone.tenants, gone.rules, gone.hours, gone.clients); err != nil {
			return fmt.Errorf("analytics: write top clients: %w", err)
		}
	}
	if len(upd.clients) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE analytics_top_clients t SET rejected = g.rejected, error = g.error
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bigint[], $6::bigint[])
				AS g (tenant_id, rule_id, hour, client_key, rejected, error)
			WHERE (t.tenant_id, t.rule_id, t.hour, t.client_key) = (g.tenant_id, g.rule_id, g.hour, g.client_key)`,
			upd.tenants, upd.rules, upd.hours, upd.clients, upd.rejected, upd.errs); err != nil {
			return fmt.Errorf("analytics: write top clients: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO analytics_top_clients AS t (tenant_id, rule_id, hour, client_key, rejected, error)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::bigint[], $6::bigint[])
		ON CONFLICT (tenant_id, rule_id, hour, client_key) DO UPDATE SET rejected = excluded.rejected, error = excluded.error`,
		ins.tenants, ins.rules, ins.hours, ins.clients, ins.rejected, ins.errs); err != nil {
		return fmt.Errorf("analytics: write top clients: %w", err)
	}
	return nil
}

// The first keys of the advisory locks that writeTop (one per tenant's
// day) and SumDays and the pruning of hours (one, which writeTop and
// migration 27's trigger take shared) take.
const (
	dayLockClass  = 0x736c6463 // "sldc"
	daysLockClass = 0x736c6473 // "slds"
)

// SumDays sums the top clients of the days over before into their days'
// rows (migration 27), which reports read instead of their hours, and
// returns how many days it summed. A day is summed once; writes to its
// hours after that go to its sums too. Each day is summed in a transaction
// of its own, while the writes of top clients wait (a day's rows: by
// default up to 100 clients of a rule an hour).
func (s *Store) SumDays(ctx context.Context, before time.Time) (days int, err error) {
	to := before.Truncate(24 * time.Hour)
	for {
		summed := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Read after the lock is held: what another consumer's SumDays
			// committed meanwhile is seen.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, daysLockClass); err != nil {
				return err
			}
			var day time.Time
			if err := tx.QueryRow(ctx, `SELECT until FROM analytics_top_clients_days`).Scan(&day); err != nil {
				return err
			}
			if !to.After(day) {
				return nil
			}
			next := day.Add(24 * time.Hour)
			if _, err := tx.Exec(ctx, `INSERT INTO analytics_top_clients_day (tenant_id, rule_id, day, client_key, rejected, error)
				SELECT tenant_id, rule_id, $1, client_key, sum(rejected), sum(error)
				FROM analytics_top_clients
				WHERE hour >= $1 AND hour < $2
				GROUP BY 1, 2, 4`, day, next); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE analytics_top_clients_days SET until = $1`, next)
			summed = err == nil
			return err
		})
		if err != nil {
			return days, fmt.Errorf("analytics: sum top clients' days: %w", err)
		}
		if !summed {
			return days, nil
		}
		days++
	}
}

// dayLock is the second key of the advisory lock of tenant's day of the
// hour (unix seconds): distinct days may share one, and so take turns
// where they need not.
func dayLock(tenant string, hour int64) int32 {
	h := fnv.New32a()
	h.Write(binary.LittleEndian.AppendUint64([]byte(tenant), uint64(hour-hour%86400)))
	return int32(h.Sum32())
}

// Prune deletes the minute rollups older than before, the hourly rollups
// of hours that ended before hoursBefore, and the marks of producers last
// seen before before, and returns how many rows went. The top clients'
// hours go with the minutes and their days with the hours: an hour goes
// once its day is summed (SumDays), and its day keeps its sums (migration
// 29), so that reports read whole days where the hours are gone.
func (s *Store) Prune(ctx context.Context, before, hoursBefore time.Time) (int64, error) {
	var n int64
	for _, job := range []struct {
		stmt string
		at   time.Time
	}{
		{`DELETE FROM analytics_minute WHERE minute < $1`, before},
		{`DELETE FROM analytics_hour WHERE hour < date_bin('1 hour', $1::timestamptz, 'epoch')`, hoursBefore},
		{`DELETE FROM analytics_top_clients_day WHERE day < date_bin('1 day', $1::timestamptz, 'epoch')`, hoursBefore},
		{`DELETE FROM analytics_producers WHERE seen_at < $1`, before},
	} {
		tag, err := s.pool.Exec(ctx, job.stmt, job.at)
		if err != nil {
			return 0, fmt.Errorf("analytics: prune: %w", err)
		}
		n += tag.RowsAffected()
	}
	hours, err := s.pruneTopHours(ctx, before)
	if err != nil {
		return 0, fmt.Errorf("analytics: prune top clients: %w", err)
	}
	return n + hours, nil
}

// pruneTopHours deletes the top clients' hours before before's hour that
// are summed in their days, which keep them, and moves hours_from to
// where the hours kept begin. It waits for the commits of top clients
// under way (writeTop), and they for it.
func (s *Store) pruneTopHours(ctx context.Context, before time.Time) (n int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0), set_config('sluice.keep_days', 'on', true)`, daysLockClass); err != nil {
			return err
		}
		cut := before.Truncate(time.Hour)
		err := tx.QueryRow(ctx, `UPDATE analytics_top_clients_days SET hours_from = greatest(hours_from, least(until, $1))
			RETURNING hours_from`, cut).Scan(&cut)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) { // without the days' mark, the hours are all there is
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM analytics_top_clients WHERE hour < $1`, cut)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
