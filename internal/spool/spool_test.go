package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func open(t *testing.T, dir string, maxBytes int64) *Spool {
	t.Helper()
	s, err := Open(dir, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func recs(from, n int) [][]byte {
	var out [][]byte
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Appendf(nil, "record-%d", i))
	}
	return out
}

// drain reads and removes every segment, returning the records in order.
func drain(t *testing.T, s *Spool) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		seq, rs, ok, err := s.Oldest()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		for _, r := range rs {
			out = append(out, bytes.Clone(r))
		}
		if err := s.Remove(seq); err != nil {
			t.Fatal(err)
		}
	}
}

// Records come back in the order appended, across segments and across a
// close and reopen; removed segments are gone from disk and from Stats.
func TestAppendReadRemoveAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), SegmentBytes/2)
	want := append(recs(0, 3), big, big, big) // three segments: the head rolls past SegmentBytes
	want = append(want, recs(3, 2)...)
	for _, r := range want {
		if err := s.Append([][]byte{r}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Records != int64(len(want)) {
		t.Fatalf("stats %+v, want %d records", st, len(want))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, 0)
	st := s.Stats()
	if st.Records != int64(len(want)) || st.Bytes < 3*SegmentBytes/2 {
		t.Fatalf("reopened: %+v", st)
	}
	if err := s.Append(recs(5, 1)); err != nil { // after a reopen, appends go to a new segment
		t.Fatal(err)
	}
	want = append(want, recs(5, 1)...)
	got := drain(t, s)
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("read %d records, want %d in order", len(got), len(want))
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Fatalf("drained: %+v", st)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if len(segs) != 0 {
		t.Fatalf("segments left: %v", segs)
	}
}

// Reading the head seals it: an append after Oldest lands in a new segment,
// so removing the one read loses nothing appended meanwhile.
// Replace leaves the oldest segment holding only what is left of it, in
// order, across a reopen (a leftover of a cut-short Replace is ignored and
// removed); with nothing left it removes the segment.
func TestReplaceKeepsWhatIsLeft(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(recs(0, 5)); err != nil {
		t.Fatal(err)
	}
	seq, rs, _, err := s.Oldest()
	if err != nil || len(rs) != 5 {
		t.Fatalf("Oldest: %d records, %v", len(rs), err)
	}
	if err := s.Append(recs(5, 2)); err != nil { // a newer segment
		t.Fatal(err)
	}
	if err := s.Replace(seq+1, recs(6, 1)); err == nil {
		t.Fatal("replaced a segment that is not the oldest")
	}
	if err := s.Replace(seq, [][]byte{rs[1], rs[3], rs[4]}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Records != 5 {
		t.Fatalf("after Replace: %+v, want 5 records", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.seg.tmp", seq)), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, 0)
	want := [][]byte{[]byte("record-1"), []byte("record-3"), []byte("record-4"), []byte("record-5"), []byte("record-6")}
	if got := drain(t, s); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("after a reopen: %q, want %q", got, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 { // the lock file
		t.Fatalf("left in the directory: %v", entries)
	}
	if err := s.Append(recs(7, 1)); err != nil {
		t.Fatal(err)
	}
	seq, _, _, _ = s.Oldest()
	if err := s.Replace(seq, nil); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Records != 0 || st.Bytes != 0 {
		t.Fatalf("after replacing with nothing: %+v", st)
	}
}

func TestAppendWhileReading(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), 0)
	if err := s.Append(recs(0, 2)); err != nil {
		t.Fatal(err)
	}
	seq, rs, ok, err := s.Oldest()
	if err != nil || !ok || len(rs) != 2 {
		t.Fatalf("oldest: %d records, %v, %v", len(rs), ok, err)
	}
	if err := s.Append(recs(2, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(seq); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s); !slices.EqualFunc(got, recs(2, 1), bytes.Equal) {
		t.Fatalf("after remove: %q", got)
	}
	if err := s.Remove(seq); err == nil {
		t.Fatal("removed a segment twice")
	}
}

// Past the bound an append is refused whole; removing makes room again.
func TestBound(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), 100)
	if err := s.Append([][]byte{bytes.Repeat([]byte("a"), 60)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append([][]byte{[]byte("b"), bytes.Repeat([]byte("c"), 40)}); !errors.Is(err, ErrFull) {
		t.Fatalf("append past the bound: %v", err)
	}
	if st := s.Stats(); st.Records != 1 || st.Bytes != 68 {
		t.Fatalf("after a refused append: %+v", st)
	}
	seq, _, _, _ := s.Oldest()
	if err := s.Remove(seq); err != nil {
		t.Fatal(err)
	}
	if err := s.Append([][]byte{[]byte("b"), bytes.Repeat([]byte("c"), 40)}); err != nil {
		t.Fatal(err)
	}
}

// A record torn by a crash ends its segment: the records before it are
// read, and the next segment after it too.
func TestTornRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(recs(0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	info, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[0], info.Size()-3); err != nil { // the last record's tail never reached the disk
		t.Fatal(err)
	}
	s = open(t, dir, 0)
	if err := s.Append(recs(3, 1)); err != nil {
		t.Fatal(err)
	}
	want := append(recs(0, 2), recs(3, 1)...)
	if got := drain(t, s); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// One process at a time: a second Open of a held directory is refused,
// and succeeds once the first closes.
func TestLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, dir, 0)
}

// Decode never panics; it returns what Encode framed, and of a prefix of
// that, a prefix of the records.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(nil, recs(0, 3)), 5)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, 0)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		Decode(data) // arbitrary bytes: no panic
		split := bytes.SplitN(data, []byte{0}, 4)
		framed := Encode(nil, split)
		got, whole := Decode(framed)
		if !whole || !slices.EqualFunc(got, split, bytes.Equal) {
			t.Fatalf("round trip: %q -> %q (whole %v)", split, got, whole)
		}
		if cut < 0 || cut > len(framed) {
			return
		}
		got, _ = Decode(framed[:cut])
		if len(got) > len(split) || !slices.EqualFunc(got, split[:len(got)], bytes.Equal) {
			t.Fatalf("prefix %d of %q read as %q", cut, split, got)
		}
	})
}

// BenchmarkAppend appends batches of 1,000 rejection-sized records (100
// bytes), each batch synced, as a publisher spills during an outage.
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := make([][]byte, 1000)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte("r"), 100)
	}
	b.SetBytes(int64(len(Encode(nil, batch))))
	for b.Loop() {
		if err := s.Append(batch); err != nil {
			b.Fatal(err)
		}
		if st := s.Stats(); st.Bytes > 64<<20 { // keep the disk use bounded
			for s.Stats().Records > 0 {
				seq, _, _, _ := s.Oldest()
				_ = s.Remove(seq)
			}
		}
	}
}

func TestWriteFileReplacesWholeAndKeepsSegmentsApart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, 0)
	if err := s.Append(recs(0, 3)); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"first, and longer than the second", "second"} {
		if err := s.WriteFile("owner.state", []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "owner.state"))
		if err != nil || string(got) != content {
			t.Fatalf("owner.state = %q, %v; want %q", got, err, content)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "owner.state.tmp")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	for _, name := range []string{"00000000000000000000.seg", "../escape", "sub/file", "", ".", "..", "/abs", "lock"} {
		if err := s.WriteFile(name, []byte("x")); err == nil {
			t.Errorf("WriteFile(%q) = nil; want an error", name)
		}
	}
	if got := drain(t, s); len(got) != 3 {
		t.Errorf("the segments hold %d records after the owner's writes; want 3", len(got))
	}
}
