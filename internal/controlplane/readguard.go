package controlplane

import (
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// DefaultReadTimeout bounds how long a client may take to send a whole
// request to the control plane, headers to the body's last byte, when
// HandlerConfig.ReadTimeout is 0.
const DefaultReadTimeout = 10 * time.Second

// earlyAuthBytes is the largest request body read before its key is
// checked: a larger one, or one of unknown length, is refused unread when
// its key is (a caller with no valid key cannot make the server hold a
// large body for it).
const earlyAuthBytes = 8 << 10

// guardReads bounds each request's reading by timeout, from its arrival to
// its body's end (then the deadline is lifted, so that a call that lasts,
// a config watch or a long report, is not cut off when it answers), and
// checks the key of an API call with a large body before reading it.
// It holds for HTTP/1.1 and HTTP/2, plain and TLS.
func guardReads(next http.Handler, auth *authenticator, timeout time.Duration) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(timeout)) // not every writer can (httptest's recorder): then unbounded
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &liftAtEOF{ReadCloser: r.Body, rc: rc, h: w.Header()}
		}
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/sluice.v1.") && (r.ContentLength < 0 || r.ContentLength > earlyAuthBytes) {
			if _, err := auth.principal(r.Context(), r.Header, r.RemoteAddr); err != nil {
				w.Header().Set("Connection", "close") // the body is not read: the connection cannot serve another request
				_ = errs.Write(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// liftAtEOF lifts the request's read deadline once its body has been read
// to the end; a body that fails before (its deadline passed) closes the
// connection after the answer, which would otherwise wait for the rest.
type liftAtEOF struct {
	io.ReadCloser
	rc   *http.ResponseController
	h    http.Header // the answer's
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.done || err == nil:
	case err == io.EOF:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	default:
		b.done = true
		b.h.Set("Connection", "close")
	}
	return n, err
}
