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
	"testing"
	"time"
)

func TestSignedRequestsVerifyAndTamperingFails(t *testing.T) {
	key := ControlKey([]byte("0123456789abcdef0123456789abcdef"))
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"tasks":[]}`)
	signed := func() *http.Request {
		r, err := http.NewRequest(http.MethodPost, "http://10.0.0.1:7070/v1/nodes/n1/heartbeat?x=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		Sign(r, body, key, now)
		return r
	}
	if _, err := Verify(signed(), body, key, now.Add(time.Minute)); err != nil {
		t.Fatalf("a signed request: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(r *http.Request) ([]byte, []byte, time.Time)
		want   string
	}{
		{"other body", func(r *http.Request) ([]byte, []byte, time.Time) { return []byte(`{}`), key, now }, "bad signature"},
		{"other method", func(r *http.Request) ([]byte, []byte, time.Time) { r.Method = http.MethodDelete; return body, key, now }, "bad signature"},
		{"other path", func(r *http.Request) ([]byte, []byte, time.Time) { r.URL.Path = "/v1/jobs"; return body, key, now }, "bad signature"},
		{"other secret", func(r *http.Request) ([]byte, []byte, time.Time) {
			return body, ControlKey([]byte("another secret of enough bytes!!")), now
		}, "bad signature"},
		{"old", func(r *http.Request) ([]byte, []byte, time.Time) { return body, key, now.Add(10 * time.Minute) }, "away from"},
		{"from the future", func(r *http.Request) ([]byte, []byte, time.Time) { return body, key, now.Add(-10 * time.Minute) }, "away from"},
		{"unsigned", func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Del("Authorization")
			return body, key, now
		}, "no Authorization"},
		{"other scheme", func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Authorization", "Bearer abc")
			return body, key, now
		}, "is not HPS1"},
		{"malformed", func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Authorization", "HPS1 t=1,s=zz")
			return body, key, now
		}, "malformed"},
		{"malformed nonce", func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), ",n=", ",n=ab", 1))
			return body, key, now
		}, "malformed nonce"},
		{"other nonce", func(r *http.Request) ([]byte, []byte, time.Time) {
			h := r.Header.Get("Authorization")
			i := strings.Index(h, ",n=") + len(",n=")
			r.Header.Set("Authorization", h[:i]+"00000000000000000000000000000000"+h[i+2*NonceSize:])
			return body, key, now
		}, "bad signature"},
		{"old format without a nonce", func(r *http.Request) ([]byte, []byte, time.Time) {
			r.Header.Set("Authorization", oldSign(r, body, key, now))
			return body, key, now
		}, "upgrade"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := signed()
			b, k, at := tc.mutate(r)
			_, err := Verify(r, b, k, at)
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v, want ErrUnauthorized saying %q", err, tc.want)
			}
		})
	}
}

// oldSign is the Authorization header of the format before nonces.
func oldSign(r *http.Request, body, key []byte, now time.Time) string {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	t := strconv.FormatInt(now.Unix(), 10)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s", AuthScheme, r.Method, r.URL.RequestURI(), t, hex.EncodeToString(sum[:]))
	return fmt.Sprintf("%s t=%s,s=%x", AuthScheme, t, m.Sum(nil))
}

// TestSignGivesEveryRequestItsOwnNonce: two signatures of the same
// request at the same second differ in their nonce, and Verify returns it.
func TestSignGivesEveryRequestItsOwnNonce(t *testing.T) {
	key := ControlKey([]byte("0123456789abcdef0123456789abcdef"))
	now := time.Unix(1_800_000_000, 0)
	var stamps [2]Stamp
	for i := range stamps {
		r, err := http.NewRequest(http.MethodGet, "http://c/v1/jobs", nil)
		if err != nil {
			t.Fatal(err)
		}
		Sign(r, nil, key, now)
		if stamps[i], err = Verify(r, nil, key, now); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r.Header.Get("Authorization"), fmt.Sprintf(",n=%x,", stamps[i].Nonce)) {
			t.Errorf("header %q does not carry the stamp's nonce %x", r.Header.Get("Authorization"), stamps[i].Nonce)
		}
	}
	if stamps[0].Nonce == stamps[1].Nonce || stamps[0].Nonce == [NonceSize]byte{} {
		t.Errorf("nonces %x and %x: want two distinct random ones", stamps[0].Nonce, stamps[1].Nonce)
	}
	if !stamps[0].Time.Equal(now) {
		t.Errorf("stamp time %v, want %v", stamps[0].Time, now)
	}
}
