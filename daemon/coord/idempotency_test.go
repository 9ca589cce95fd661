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
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/store"
	"github.com/heterps/heterps/internal/syncbuf"
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

// TestASubmissionNotRecordedIsNotAnsweredByItsRetry: when the state
// database cannot record a job (a full disk; here a closed store), the
// submission is refused with 503, and its retry under the same key is
// tried again, refused again, instead of getting the unrecorded job as if
// it had been created.
func TestASubmissionNotRecordedIsNotAnsweredByItsRetry(t *testing.T) {
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	c, stop := runCoordinator(t, cfg)
	defer stop()
	if err := c.store.Close(); err != nil {
		t.Fatal(err)
	}
	key := api.NewIdempotencyKey()
	for try := range 2 {
		req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(ctrJob))
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		req.Header.Set(api.IdempotencyKeyHeader, key)
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "recording the job") {
			t.Errorf("try %d: %d %s, want 503 naming the state database", try, rec.Code, rec.Body)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range c.jobs {
		if r := j.record(); r.IdempotencyKey != "" {
			t.Errorf("job %s (%s) keeps the refused request's key for the store's retry to record", r.ID, r.State)
		}
	}
}

// TestACoordinatorThatCannotRecordIsNotReady: while the state database
// fails to commit, /readyz says so and the log says it once a minute;
// once a commit succeeds it is ready, and the log says that too.
func TestACoordinatorThatCannotRecordIsNotReady(t *testing.T) {
	var logs syncbuf.Buffer
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	c, stop := runCoordinator(t, cfg)
	defer stop()
	c.serving.Store(true) // as Serve does
	if err := c.Ready(); err != nil {
		t.Fatalf("a fresh coordinator: %v", err)
	}
	if err := <-c.store.PutJob(store.Job{ID: strings.Repeat("j", 40000)}); err == nil {
		t.Fatal("a 40,000-byte key was committed")
	}
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "state database cannot record changes") {
		t.Errorf("after a failed commit: Ready() = %v", err)
	}
	check := func(at time.Time) {
		c.mu.Lock()
		c.checkStore(at)
		c.mu.Unlock()
	}
	now := time.Now()
	check(now)
	<-c.store.PutJob(store.Job{ID: strings.Repeat("k", 40000)})
	check(now.Add(time.Second)) // failing still, within the minute: not again
	if n := strings.Count(logs.String(), "changes not recorded"); n != 1 {
		t.Errorf("logged the failures %d times, want once:\n%s", n, logs.String())
	}
	if err := <-c.store.PutJob(store.Job{ID: "j9"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err != nil {
		t.Errorf("after a commit that succeeded: %v", err)
	}
	check(now.Add(2 * time.Second))
	if !strings.Contains(logs.String(), "recording changes again") {
		t.Errorf("the recovery is not logged:\n%s", logs.String())
	}
}
