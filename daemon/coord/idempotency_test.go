package coord

import (
	"bytes"
	"encoding/json"
	"net/http"
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
