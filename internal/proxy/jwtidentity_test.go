package proxy

import (
	"crypto/ed25519"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// BenchmarkJWTIdentity measures naming a proxied request's client by its
// token: verified (an Ed25519 signature), and remembered as verified.
func BenchmarkJWTIdentity(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keys := func(*jwt.Token) (any, error) { return pub, nil }
	token := func(sub string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(priv)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprint("cached=", cached), func(b *testing.B) {
			id := NewJWTIdentity("sub", keys, "", "")
			r, _ := http.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", "Bearer "+token("alice"))
			for b.Loop() {
				if !cached {
					id.cache.Purge()
				}
				if id.client(r) != "alice" {
					b.Fatal("not alice")
				}
			}
		})
	}
}
