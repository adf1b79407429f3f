package decisiontest

import "github.com/prometheus/client_golang/prometheus"

// Counted reads the counter name of labels (name, value pairs) from reg:
// 0 when it has no such series.
func Counted(reg prometheus.Gatherer, name string, labels ...string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
