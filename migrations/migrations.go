// Package migrations embeds the PostgreSQL schema migrations, applied with
// golang-migrate at start (pgstore.Migrate). Files are NNNNNN_name.up.sql and
// NNNNNN_name.down.sql; a migration, once released, is never edited.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
