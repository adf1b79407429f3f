// Package deploy checks the deployment files at the repository root
// (docker-compose.yml, Dockerfile) against the binaries' documented
// configuration; it has tests only.
package deploy
