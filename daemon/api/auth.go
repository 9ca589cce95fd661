package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Requests to a coordinator that has the cluster secret are signed: the
// Authorization header carries
//
//	HPS1 t=<unix seconds>,s=<hex HMAC-SHA256>
//
// the MAC over "HPS1\n" + method + "\n" + path?query + "\n" + t + "\n" +
// hex(SHA-256(body)), keyed by ControlKey(secret). The coordinator checks it
// before it decodes anything, and refuses a time more than MaxClockSkew
// away from its own clock. The key is derived from the cluster secret, so
// a MAC seen on the network reveals neither; a captured request can be
// replayed within the skew window (the control plane is not encrypted: run
// it on a trusted network or behind TLS).

// AuthScheme names the signature scheme in the Authorization header.
const AuthScheme = "HPS1"

// MaxClockSkew is how far a request's time may be from the coordinator's.
const MaxClockSkew = 5 * time.Minute

// ErrUnauthorized is wrapped by Verify's errors.
var ErrUnauthorized = errors.New("unauthorized")

// ControlKey derives the control plane's MAC key from the cluster secret.
func ControlKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("heterps control plane v1"))
	return m.Sum(nil)
}

// Sign sets r's Authorization header for body (r's body, which the caller
// sends) at time now.
func Sign(r *http.Request, body, key []byte, now time.Time) {
	t := strconv.FormatInt(now.Unix(), 10)
	r.Header.Set("Authorization", fmt.Sprintf("%s t=%s,s=%s", AuthScheme, t, hex.EncodeToString(mac(key, r, t, body))))
}

// Verify checks r's signature over body at time now.
func Verify(r *http.Request, body, key []byte, now time.Time) error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return fmt.Errorf("%w: no Authorization header (the coordinator requires signed requests: give the cluster secret)", ErrUnauthorized)
	}
	t, sig, err := parseAuth(h)
	if err != nil {
		return err
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: time %q", ErrUnauthorized, t)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxClockSkew || d < -MaxClockSkew {
		return fmt.Errorf("%w: the request's time is %s away from the coordinator's clock (at most %s)", ErrUnauthorized, d.Round(time.Second), MaxClockSkew)
	}
	if !hmac.Equal(sig, mac(key, r, t, body)) {
		return fmt.Errorf("%w: bad signature (another cluster secret?)", ErrUnauthorized)
	}
	return nil
}

func parseAuth(h string) (t string, sig []byte, err error) {
	rest, ok := strings.CutPrefix(h, AuthScheme+" ")
	if !ok {
		return "", nil, fmt.Errorf("%w: Authorization is not %s", ErrUnauthorized, AuthScheme)
	}
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "t":
			t = v
		case "s":
			if sig, err = hex.DecodeString(v); err != nil || len(sig) != sha256.Size {
				return "", nil, fmt.Errorf("%w: malformed signature", ErrUnauthorized)
			}
		}
	}
	if t == "" || sig == nil {
		return "", nil, fmt.Errorf("%w: Authorization lacks t= or s=", ErrUnauthorized)
	}
	return t, sig, nil
}

func mac(key []byte, r *http.Request, t string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s", AuthScheme, r.Method, r.URL.RequestURI(), t, hex.EncodeToString(sum[:]))
	return m.Sum(nil)
}
