package proxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
)

// JWTIdentity names a proxied request's client by a claim of the JSON Web
// Token it carries (Authorization: Bearer), once the token verifies: its
// signature by one of Keys' public keys (an identity provider's JWKS), its
// expiry and not-before times, and Issuer and Audience when set. A request
// whose token is missing or does not verify is named as if there were no
// JWTIdentity (identity header, cookie, IP), so that nobody becomes a user
// by writing a token of their own.
type JWTIdentity struct {
	// Claim names the client, such as "sub"; a string or a number.
	Claim string
	// Keys finds the key a token's header names (keyfunc over a JWKS URL).
	Keys             jwt.Keyfunc
	Issuer, Audience string

	parser *jwt.Parser
	cache  *lru.Cache[[sha256.Size]byte, verified]
	now    func() time.Time
}

// verified is a token that verified, and until when it may be believed
// without verifying it again.
type verified struct {
	client string
	until  time.Time
}

// jwtCacheSize bounds the tokens remembered as verified (~100 B each).
const jwtCacheSize = 16384

// jwtCacheFor is the longest a verified token is believed without a
// check, when it does not expire sooner: a key the provider withdraws
// stops naming clients within it.
const jwtCacheFor = 5 * time.Minute

// asymmetric are the signing methods a token may use: a provider's public
// keys verify them, and no secret the proxy holds could forge one.
var asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// NewJWTIdentity returns a JWTIdentity of claim, verified with keys (and
// iss and aud when not empty).
func NewJWTIdentity(claim string, keys jwt.Keyfunc, iss, aud string) *JWTIdentity {
	opts := []jwt.ParserOption{jwt.WithValidMethods(asymmetric), jwt.WithLeeway(30 * time.Second)}
	if iss != "" {
		opts = append(opts, jwt.WithIssuer(iss))
	}
	if aud != "" {
		opts = append(opts, jwt.WithAudience(aud))
	}
	cache, _ := lru.New[[sha256.Size]byte, verified](jwtCacheSize) // a positive size: cannot fail
	return &JWTIdentity{Claim: claim, Keys: keys, Issuer: iss, Audience: aud, parser: jwt.NewParser(opts...), cache: cache, now: time.Now}
}

// NewJWKSIdentity returns a JWTIdentity of claim whose keys are those of
// the JSON Web Key Set at jwksURL, read in the background until ctx ends:
// at start, hourly, and when a token names a key it does not hold (at
// most every five minutes). A provider unreachable at start leaves tokens
// unverified, and their requests named otherwise, until it answers.
func NewJWKSIdentity(ctx context.Context, claim, jwksURL, iss, aud string) (*JWTIdentity, error) {
	if u, err := url.Parse(jwksURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("JWKS URL %q: want an https:// URL", jwksURL)
	}
	keys, err := keyfunc.NewDefaultCtx(ctx, []string{jwksURL})
	if err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", jwksURL, err)
	}
	return NewJWTIdentity(claim, keys.Keyfunc, iss, aud), nil
}

// client returns the client r's token names, or "" when it carries none
// that verifies.
func (j *JWTIdentity) client(r *http.Request) string {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || raw == "" || len(raw) > 16<<10 {
		return ""
	}
	sum := sha256.Sum256([]byte(raw))
	now := j.now()
	if v, ok := j.cache.Get(sum); ok && now.Before(v.until) {
		return v.client
	}
	claims := jwt.MapClaims{}
	if _, err := j.parser.ParseWithClaims(raw, claims, j.Keys); err != nil {
		return ""
	}
	var client string
	switch v := claims[j.Claim].(type) {
	case string:
		client = v
	case float64:
		client = strconv.FormatFloat(v, 'f', -1, 64)
	}
	if client == "" {
		return ""
	}
	until := now.Add(jwtCacheFor)
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil && exp.Before(until) {
		until = exp.Time
	}
	j.cache.Add(sum, verified{client: client, until: until})
	return client
}
