// Package deploy checks the deployment files (docker-compose.yml,
// Dockerfile, deploy/: Kubernetes manifests, Prometheus alerting rules, a
// Grafana dashboard)
// against the binaries' documented configuration and the metrics they
// export, and the Makefile's fuzz target against the fuzz tests; it has
// tests only.
package deploy
