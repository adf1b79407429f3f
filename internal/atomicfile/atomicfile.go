// Package atomicfile replaces files whole: a reader, or the next run after
// a crash of the process or of the machine, finds the old content or the
// new, never a mix or a torn write.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile puts data at path with permissions perm: a temporary file
// beside it (named path's base, a random part and ".tmp"), synced and
// renamed over path, and then the directory synced, so that the rename
// itself outlives a machine's crash. On error the temporary file is
// removed and path is as it was.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return SyncDir(dir)
}

// SyncDir syncs the directory dir: the names created, renamed or removed
// in it until now outlive a machine's crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
