package api

import (
	"errors"
	"net/http"
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
	if err := Verify(signed(), body, key, now.Add(time.Minute)); err != nil {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := signed()
			b, k, at := tc.mutate(r)
			err := Verify(r, b, k, at)
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v, want ErrUnauthorized saying %q", err, tc.want)
			}
		})
	}
}
