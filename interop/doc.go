// Package interop holds the tests that drive Sluice with other projects'
// own clients. It is a module of its own so that their dependencies (a
// gubernator client brings etcd's and Kubernetes') stay out of Sluice's
// binaries and go.mod; `make test` runs it after the main module.
package interop
