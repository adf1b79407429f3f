package dataplane

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/telemetry"
)

// A publisher's counters reach /metrics: with no Run to drain it, a buffer
// of 2 holds two of five rejections and drops three.
func TestPublisherMetrics(t *testing.T) {
	t.Parallel()
	p := events.NewPublisher(events.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Buffer: 2})
	for range 5 {
		p.Rejected("t1", "free", "r1", "alice", 1, time.Now(), false)
	}
	reg := telemetry.NewRegistry()
	reg.MustRegister(publisherMetrics(p)...)
	mux := http.NewServeMux()
	telemetry.Mount(mux, reg, func() bool { return true }, nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"sluice_events_dropped_total 3", "sluice_events_queued 2",
		"sluice_events_sent_total 0", "sluice_events_write_errors_total 0", "sluice_events_spooled 0"} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}
