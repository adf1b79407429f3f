// Package spool keeps records on local disk while their destination is
// away, so that an outage longer than a memory buffer, or a restart in the
// middle of one, loses none of them. Records are appended to numbered
// segment files, framed and checksummed, and read back oldest segment
// first; a segment is removed once its records are delivered. A crash
// leaves at most a torn last record, which reading skips.
//
// A Spool is owned by one process at a time (an advisory lock on the
// directory) and is not safe for concurrent use, except Stats.
package spool

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/atomicfile"
)

// ErrFull is returned by Append when the records would take the spool past
// its byte bound; nothing is appended.
var ErrFull = errors.New("spool: full")

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("spool: directory in use by another process")

// SegmentBytes is the size past which appends go to a new segment: the
// most one delivery (Oldest) carries.
const SegmentBytes = 1 << 20

const (
	suffix   = ".seg"
	frameLen = 8 // uint32 length, uint32 CRC-32C of the payload
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Spool is a directory of segments. The zero value is not usable: Open.
type Spool struct {
	dir     string
	max     int64
	unlock  func() error
	segs    []segment // oldest first; the last is head's when head is open
	head    *os.File  // the segment taking appends, nil when sealed
	next    uint64    // sequence number of the next new segment
	bytes   atomic.Int64
	records atomic.Int64
}

type segment struct {
	seq     uint64
	bytes   int64
	records int64
}

// Stats is what a spool holds.
type Stats struct {
	Records, Bytes int64
}

// Open opens (creating it when missing) the spool in dir, bounded to
// maxBytes of segments (0 or less: no bound), and counts the records left
// there by an earlier process.
func Open(dir string, maxBytes int64) (*Spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, max: maxBytes, unlock: unlock}
	entries, err := os.ReadDir(dir)
	if err != nil {
		_ = unlock()
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") { // a Replace or WriteFile a crash cut short
			_ = os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), suffix), 10, 64)
		if err != nil || !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			_ = unlock()
			return nil, fmt.Errorf("spool: %w", err)
		}
		recs, _ := Decode(data)
		s.segs = append(s.segs, segment{seq: seq, bytes: int64(len(data)), records: int64(len(recs))})
		s.bytes.Add(int64(len(data)))
		s.records.Add(int64(len(recs)))
		s.next = max(s.next, seq+1)
	}
	slices.SortFunc(s.segs, func(a, b segment) int { return cmp.Compare(a.seq, b.seq) })
	return s, nil
}

// Dir is the spool's directory, which its owner may keep other files of
// its own in (names not ending in .seg; see WriteFile).
func (s *Spool) Dir() string { return s.dir }

// WriteFile replaces the file name of the spool's directory with data, as
// Replace does a segment: a crash, of the process or of the machine,
// leaves the old content or the new, whole.
func (s *Spool) WriteFile(name string, data []byte) error {
	if !filepath.IsLocal(name) || name != filepath.Base(name) || name == "." || name == "lock" || strings.HasSuffix(name, suffix) {
		return fmt.Errorf("spool: write %q: not a file name of the owner's", name)
	}
	return atomicfile.WriteFile(filepath.Join(s.dir, name), data, 0o600)
}

// Stats returns the records and bytes the spool holds; safe for
// concurrent use.
func (s *Spool) Stats() Stats { return Stats{Records: s.records.Load(), Bytes: s.bytes.Load()} }

// Append writes records to the head segment and syncs it: all of them, or
// none with ErrFull when they would pass the bound. After a failed write
// the head is sealed, so that a torn record ends its segment.
func (s *Spool) Append(records [][]byte) error {
	if len(records) == 0 {
		return nil
	}
	data := Encode(nil, records)
	if s.max > 0 && s.bytes.Load()+int64(len(data)) > s.max {
		return ErrFull
	}
	if s.head != nil && s.segs[len(s.segs)-1].bytes >= SegmentBytes {
		if err := s.seal(); err != nil {
			return err
		}
	}
	if s.head == nil {
		f, err := os.OpenFile(s.path(s.next), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("spool: %w", err)
		}
		s.head = f
		s.segs = append(s.segs, segment{seq: s.next})
		s.next++
		if err := atomicfile.SyncDir(s.dir); err != nil { // the new segment's name, for a machine's crash
			_ = s.seal()
			return fmt.Errorf("spool: append: %w", err)
		}
	}
	n, err := s.head.Write(data)
	if err == nil {
		err = s.head.Sync()
	}
	last := &s.segs[len(s.segs)-1]
	last.bytes += int64(n)
	s.bytes.Add(int64(n))
	if err != nil {
		_ = s.seal()
		return fmt.Errorf("spool: append: %w", err)
	}
	last.records += int64(len(records))
	s.records.Add(int64(len(records)))
	return nil
}

// Oldest returns the records of the oldest segment and its sequence
// number for Remove; ok is false when the spool is empty. Reading the head
// seals it: later appends start a new segment.
func (s *Spool) Oldest() (seq uint64, records [][]byte, ok bool, err error) {
	if len(s.segs) == 0 {
		return 0, nil, false, nil
	}
	if len(s.segs) == 1 && s.head != nil {
		if err := s.seal(); err != nil {
			return 0, nil, false, err
		}
	}
	seg := s.segs[0]
	data, err := os.ReadFile(s.path(seg.seq))
	if err != nil {
		return 0, nil, false, fmt.Errorf("spool: %w", err)
	}
	records, _ = Decode(data)
	return seg.seq, records, true, nil
}

// Remove deletes the oldest segment, whose records Oldest returned as seq
// and which have been delivered.
func (s *Spool) Remove(seq uint64) error {
	if len(s.segs) == 0 || s.segs[0].seq != seq || (len(s.segs) == 1 && s.head != nil) {
		return fmt.Errorf("spool: remove %d: not the oldest sealed segment", seq)
	}
	if err := os.Remove(s.path(seq)); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.bytes.Add(-s.segs[0].bytes)
	s.records.Add(-s.segs[0].records)
	s.segs = s.segs[1:]
	return nil
}

// Replace rewrites the oldest segment, whose records Oldest returned as
// seq, to hold only records (those of it not delivered yet, in order): a
// new file renamed over it, so that a crash leaves the old segment or the
// new one, whole. No records removes it.
func (s *Spool) Replace(seq uint64, records [][]byte) error {
	if len(records) == 0 {
		return s.Remove(seq)
	}
	if len(s.segs) == 0 || s.segs[0].seq != seq || (len(s.segs) == 1 && s.head != nil) {
		return fmt.Errorf("spool: replace %d: not the oldest sealed segment", seq)
	}
	data := Encode(nil, records)
	if err := atomicfile.WriteFile(s.path(seq), data, 0o600); err != nil {
		return fmt.Errorf("spool: replace: %w", err)
	}
	seg := &s.segs[0]
	s.bytes.Add(int64(len(data)) - seg.bytes)
	s.records.Add(int64(len(records)) - seg.records)
	seg.bytes, seg.records = int64(len(data)), int64(len(records))
	return nil
}

// Close seals the head and releases the directory; what the spool holds
// stays for the next Open.
func (s *Spool) Close() error {
	return errors.Join(s.seal(), s.unlock())
}

func (s *Spool) seal() error {
	if s.head == nil {
		return nil
	}
	err := s.head.Close()
	s.head = nil
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

func (s *Spool) path(seq uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, suffix))
}

// Encode appends the frames of records to dst: each a little-endian
// uint32 length, the CRC-32C (Castagnoli) of the record, and the record.
func Encode(dst []byte, records [][]byte) []byte {
	for _, r := range records {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r)))
		dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(r, castagnoli))
		dst = append(dst, r...)
	}
	return dst
}

// Decode returns the records framed in data, up to the first frame that is
// cut short or fails its checksum (a write torn by a crash), and whether
// all of data was read. The records alias data.
func Decode(data []byte) (records [][]byte, whole bool) {
	for len(data) > 0 {
		if len(data) < frameLen {
			return records, false
		}
		n := binary.LittleEndian.Uint32(data)
		if uint64(n) > uint64(len(data)-frameLen) {
			return records, false
		}
		r := data[frameLen : frameLen+int(n)]
		if crc32.Checksum(r, castagnoli) != binary.LittleEndian.Uint32(data[4:]) {
			return records, false
		}
		records = append(records, r)
		data = data[frameLen+int(n):]
	}
	return records, true
}
