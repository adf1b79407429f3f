package reports

import (
	"bytes"
	"encoding/csv"
	"strconv"
	"time"
)

// TimeseriesCSV renders points as CSV with a header row.
func TimeseriesCSV(points []Point) string {
	return render([]string{"start", "allowed", "rejected", "shadow_rejected", "dropped_rejections"}, len(points), func(i int) []string {
		p := points[i]
		return append([]string{p.Start.UTC().Format(time.RFC3339)}, p.Counts.strings()...)
	})
}

// TopClientsCSV renders clients as CSV with a header row.
func TopClientsCSV(clients []TopClient) string {
	return render([]string{"client_key", "rule_id", "rule_name", "rejected", "error"}, len(clients), func(i int) []string {
		c := clients[i]
		return []string{safe(c.ClientKey), c.RuleID, safe(c.RuleName), strconv.FormatInt(c.Rejected, 10), strconv.FormatInt(c.Error, 10)}
	})
}

// BreakdownCSV renders rows, a breakdown by, as CSV with a header row.
func BreakdownCSV(rows []Row, by By) string {
	counts := []string{"allowed", "rejected", "shadow_rejected", "dropped_rejections"}
	header := append([]string{"rule_id", "rule_name", "tier"}, counts...)
	switch by {
	case ByTier:
		header = append([]string{"tier"}, counts...)
	case ByRegion:
		header = append([]string{"region"}, counts...)
	}
	return render(header, len(rows), func(i int) []string {
		r := rows[i]
		switch by {
		case ByTier:
			return append([]string{r.Tier}, r.Counts.strings()...)
		case ByRegion:
			return append([]string{safe(r.Region)}, r.Counts.strings()...)
		}
		return append([]string{r.RuleID, safe(r.RuleName), r.Tier}, r.Counts.strings()...)
	})
}

func (c Counts) strings() []string {
	return []string{strconv.FormatInt(c.Allowed, 10), strconv.FormatInt(c.Rejected, 10),
		strconv.FormatInt(c.ShadowRejected, 10), strconv.FormatInt(c.DroppedRejections, 10)}
}

func render(header []string, n int, row func(int) []string) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write(header) // writes to a bytes.Buffer cannot fail
	for i := range n {
		_ = w.Write(row(i))
	}
	w.Flush()
	return b.String()
}

// safe defuses a cell a spreadsheet would run as a formula (client keys
// come from callers of the check API).
func safe(s string) string {
	if s != "" && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@' || s[0] == '\t' || s[0] == '\r') {
		return "'" + s
	}
	return s
}
