package grpcserve

import "bytes"

// A client sends each call of a connection much the same header block:
// the same method and metadata, its fields indexed or, the check key's,
// a literal never indexed. A block that is the last one again, byte for
// byte, and that left the HPACK decoder's table as it found it, decodes
// to the same fields: decodeBlock keeps them instead of decoding again (a
// Huffman-coded key and a string copy each call).

// decodeBlock decodes a whole header block into c.fields.
func (c *conn) decodeBlock(block []byte) error {
	if c.blockKept && bytes.Equal(block, c.lastBlock) {
		return nil // c.fields are still the last block's
	}
	c.blockKept = false
	c.fields = c.fields[:0]
	if _, err := c.dec.Write(block); err != nil {
		return errProtocol
	}
	if err := c.dec.Close(); err != nil {
		return errProtocol
	}
	if stateless(block) {
		c.lastBlock = append(c.lastBlock[:0], block...)
		c.blockKept = true
	}
	return nil
}

// stateless reports whether block decodes without changing the decoder's
// dynamic table: every field is indexed or a literal without (or never)
// indexing, and no field resizes the table. A block it cannot read is
// not stateless.
func stateless(b []byte) bool {
	for len(b) > 0 {
		var ok bool
		switch f := b[0]; {
		case f&0x80 != 0: // indexed
			_, b, ok = hpackInt(b, 7)
		case f&0xc0 == 0x40, f&0xe0 == 0x20: // incremental indexing, table size update
			return false
		default: // without indexing (0000), never indexed (0001)
			var name uint64
			if name, b, ok = hpackInt(b, 4); ok && name == 0 {
				b, ok = skipString(b)
			}
			if ok {
				b, ok = skipString(b)
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// hpackInt reads an HPACK integer of an n-bit prefix (RFC 7541, 5.1).
func hpackInt(b []byte, n uint) (uint64, []byte, bool) {
	limit := uint64(1)<<n - 1
	v := uint64(b[0]) & limit
	b = b[1:]
	if v < limit {
		return v, b, true
	}
	for shift := uint(0); shift < 28; shift += 7 {
		if len(b) == 0 {
			return 0, nil, false
		}
		c := b[0]
		b = b[1:]
		v += uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, b, true
		}
	}
	return 0, nil, false
}

// skipString skips an HPACK string literal (RFC 7541, 5.2).
func skipString(b []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	n, b, ok := hpackInt(b, 7)
	if !ok || n > uint64(len(b)) {
		return nil, false
	}
	return b[n:], true
}
