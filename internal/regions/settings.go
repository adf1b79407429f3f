package regions

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBrokers reads each region's Kafka brokers from
// "region=host:port,host:port;region=host:port".
func ParseBrokers(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		region, brokers, ok := strings.Cut(part, "=")
		region = strings.TrimSpace(region)
		if !ok || region == "" {
			return nil, fmt.Errorf("%q: want region=host:port[,host:port]", part)
		}
		if _, dup := out[region]; dup {
			return nil, fmt.Errorf("region %q given twice", region)
		}
		for b := range strings.SplitSeq(brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out[region] = append(out[region], b)
			}
		}
		if len(out[region]) == 0 {
			return nil, fmt.Errorf("region %q: no brokers", region)
		}
	}
	return out, nil
}

// ParseAssumption reads what a silent region is taken to spend: "rate"
// (AssumeLastRate) or a share of the limit from 0 to 1 (AssumeShare).
func ParseAssumption(s string) (Assumption, float64, error) {
	if s == "" || s == "rate" {
		return AssumeLastRate, 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, 0, fmt.Errorf("%q: want rate, or a share of the limit from 0 to 1", s)
	}
	return AssumeShare, f, nil
}
