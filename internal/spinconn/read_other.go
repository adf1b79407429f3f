//go:build !unix

package spinconn

// Read is the connection's own where non-blocking reads are not wired.
func (c *conn) Read(p []byte) (int, error) { return c.Conn.Read(p) }
