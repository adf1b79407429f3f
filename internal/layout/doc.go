// Package layout holds no code. Its tests hold the rules of the house
// that docs/architecture.md states: which package may import which, what
// each binary links, that every protocol goes through the decision
// service, that errors map to answers through one table, and how large a
// file may grow.
package layout
