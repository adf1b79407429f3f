package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for _, content := range []string{"first, and longer than the second", "second"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("state = %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want 0600", fi.Mode().Perm())
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(names) > 0 {
		t.Errorf("temporary files left: %v", names)
	}
}

func TestWriteFileFailingLeavesTheOldContent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory where the file should be: the rename fails.
	if err := WriteFile(dir, []byte("new"), 0o600); err == nil {
		t.Fatal("WriteFile over a directory = nil; want an error")
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "old" {
		t.Errorf("state = %q, %v; want the old content", got, err)
	}
	if names, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "*.tmp")); len(names) > 0 {
		t.Errorf("temporary files left: %v", names)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "state"), []byte("x"), 0o600); err == nil {
		t.Error("WriteFile in a missing directory = nil; want an error")
	}
}
