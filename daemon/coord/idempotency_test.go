package coord

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

// TestRetriedSubmissionMakesOneJob: submissions that repeat an
// idempotency key, one after the other or at once, all get the job the
// first created; another key makes another job; a malformed key is
// refused.
func TestRetriedSubmissionMakesOneJob(t *testing.T) {
	tc := startCluster(t, nil)
	post := func(key string) (int, string) {
		req, err := http.NewRequest("POST", tc.base+"/v1/jobs", bytes.NewReader([]byte(ctrJob)))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		req.Header.Set(api.IdempotencyKeyHeader, key)
		resp, err := tc.client.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var r api.SubmitResponse
		json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r.JobID
	}
	key := api.NewIdempotencyKey()
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			status, id := post(key)
			if status != http.StatusCreated {
				t.Errorf("try %d: status %d", i, status)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one key made jobs %v", ids)
		}
	}
	if _, other := post(api.NewIdempotencyKey()); other == ids[0] || other == "" {
		t.Errorf("another key got job %q", other)
	}
	var jobs []api.JobStatus
	tc.call("GET", "/v1/jobs", nil, http.StatusOK, &jobs)
	if len(jobs) != 2 {
		t.Errorf("%d jobs after 9 submissions with 2 keys", len(jobs))
	}
	if status, _ := post("short"); status != http.StatusBadRequest {
		t.Errorf("malformed key: status %d", status)
	}
}

// TestIdempotencyKeysSurviveARestart: a retry that reaches a restarted
// coordinator gets the job the first try created.
func TestIdempotencyKeysSurviveARestart(t *testing.T) {
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	key := api.NewIdempotencyKey()
	submit := func() string {
		c, stop := runCoordinator(t, cfg)
		defer stop()
		req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(ctrJob))
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		req.Header.Set(api.IdempotencyKeyHeader, key)
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, req)
		var r api.SubmitResponse
		if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &r) != nil {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
		return r.JobID
	}
	first := submit()
	if again := submit(); again != first {
		t.Errorf("the retry after a restart made job %s; the first try made %s", again, first)
	}
}
