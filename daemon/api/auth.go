package api

import (
	"crypto/hmac"
	"crypto/rand"
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
//	HPS1 t=<unix seconds>,n=<32 hex digits>,s=<hex HMAC-SHA256>
//
// the MAC over "HPS1\n" + method + "\n" + path?query + "\n" + t + "\n" +
// n + "\n" + hex(SHA-256(body)), keyed by ControlKey(secret). n is a
// 128-bit random nonce, fresh for every request (a retry is signed anew).
// The coordinator checks the MAC before it decodes anything, refuses a time
// more than MaxClockSkew away from its own clock, and then refuses a nonce
// it has already accepted within that window (NonceCache), so a captured
// request cannot be replayed. The key is derived from the cluster secret,
// so a MAC seen on the network reveals neither. The control plane is not
// encrypted: run it on a trusted network or behind TLS.

// AuthScheme names the signature scheme in the Authorization header.
const AuthScheme = "HPS1"

// MaxClockSkew is how far a request's time may be from the coordinator's.
const MaxClockSkew = 5 * time.Minute

// NonceSize is the length of a request's nonce in bytes (hex-encoded in
// the header).
const NonceSize = 16

// ErrUnauthorized is wrapped by Verify's errors.
var ErrUnauthorized = errors.New("unauthorized")

// Stamp is what a verified signature vouches for: when the request was
// signed and its nonce.
type Stamp struct {
	Time  time.Time
	Nonce [NonceSize]byte
}

// ControlKey derives the control plane's MAC key from the cluster secret.
func ControlKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("heterps control plane v1"))
	return m.Sum(nil)
}

// Sign sets r's Authorization header for body (r's body, which the caller
// sends) at time now, with a fresh random nonce.
func Sign(r *http.Request, body, key []byte, now time.Time) {
	var nonce [NonceSize]byte
	rand.Read(nonce[:]) // never fails (crypto/rand aborts the program instead)
	t := strconv.FormatInt(now.Unix(), 10)
	n := hex.EncodeToString(nonce[:])
	r.Header.Set("Authorization", fmt.Sprintf("%s t=%s,n=%s,s=%s", AuthScheme, t, n, hex.EncodeToString(mac(key, r, t, n, body))))
}

// Verify checks r's signature over body at time now and returns its stamp.
// It does not know whether the nonce was used before: that is
// NonceCache.Seen's job, to be asked only after Verify succeeded.
func Verify(r *http.Request, body, key []byte, now time.Time) (Stamp, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return Stamp{}, fmt.Errorf("%w: no Authorization header (the coordinator requires signed requests: give the cluster secret)", ErrUnauthorized)
	}
	a, err := parseAuth(h)
	if err != nil {
		return Stamp{}, err
	}
	sec, err := strconv.ParseInt(a.t, 10, 64)
	if err != nil {
		return Stamp{}, fmt.Errorf("%w: time %q", ErrUnauthorized, a.t)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > MaxClockSkew || d < -MaxClockSkew {
		return Stamp{}, fmt.Errorf("%w: the request's time is %s away from the coordinator's clock (at most %s)", ErrUnauthorized, d.Round(time.Second), MaxClockSkew)
	}
	if !hmac.Equal(a.sig, mac(key, r, a.t, a.n, body)) {
		return Stamp{}, fmt.Errorf("%w: bad signature (another cluster secret?)", ErrUnauthorized)
	}
	s := Stamp{Time: at}
	copy(s.Nonce[:], a.nonce)
	return s, nil
}

// authHeader is a parsed Authorization header: t and n as sent (they are
// MAC'd as text), the nonce and signature decoded.
type authHeader struct {
	t, n       string
	nonce, sig []byte
}

func parseAuth(h string) (authHeader, error) {
	var a authHeader
	rest, ok := strings.CutPrefix(h, AuthScheme+" ")
	if !ok {
		return a, fmt.Errorf("%w: Authorization is not %s", ErrUnauthorized, AuthScheme)
	}
	var err error
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "t":
			a.t = v
		case "n":
			if a.nonce, err = hex.DecodeString(v); err != nil || len(a.nonce) != NonceSize {
				return a, fmt.Errorf("%w: malformed nonce (want %d hex digits)", ErrUnauthorized, 2*NonceSize)
			}
			a.n = v
		case "s":
			if a.sig, err = hex.DecodeString(v); err != nil || len(a.sig) != sha256.Size {
				return a, fmt.Errorf("%w: malformed signature", ErrUnauthorized)
			}
		}
	}
	if a.t == "" || a.sig == nil {
		return a, fmt.Errorf("%w: Authorization lacks t= or s=", ErrUnauthorized)
	}
	if a.nonce == nil {
		return a, fmt.Errorf("%w: Authorization lacks a nonce (n=): the client signs in the old replayable format; upgrade it to this coordinator's version", ErrUnauthorized)
	}
	return a, nil
}

func mac(key []byte, r *http.Request, t, n string, body []byte) []byte {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s\n%s", AuthScheme, r.Method, r.URL.RequestURI(), t, n, hex.EncodeToString(sum[:]))
	return m.Sum(nil)
}
