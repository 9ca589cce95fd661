package coord

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// TestBadJobFilesNameTheLine submits broken job files: each is refused with
// 400 and an error at the file's line of the offending field, including
// the checks only the coordinator can make (model, data kind, method).
func TestBadJobFilesNameTheLine(t *testing.T) {
	tc := startCluster(t, nil)
	for _, tc2 := range []struct {
		name, src, want string
	}{
		{"syntax", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = = 8\n", "job.toml:3:"},
		{"unknown key", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\nepoch = 2\n", "job.toml:5:1: epoch: unknown key"},
		{"bad batch", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 0\nsteps = 1\n", "job.toml:3:1: batch: must be in"},
		{"unknown model", "data = \"synthetic\"\nbatch = 8\nsteps = 1\nmodel = \"resnet\"\n", "job.toml:4:1: model: model \"resnet\": not a file and not in the zoo"},
		{"unknown data kind", "model = \"ctrdnn\"\n\ndata = \"parquet:/x\"\nbatch = 8\nsteps = 1\n", "job.toml:3:1: data: data spec \"parquet:/x\": unknown kind"},
		{"unknown method", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\nmethod = \"magic\"\n", "job.toml:5:1: method: unknown method \"magic\" (want one of"},
		{"unknown ps type", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\nps_type = \"tpu\"\n", "job.toml:5:1: ps_type: type \"tpu\" is not in the catalog"},
		{"data the model cannot read", "model = \"mlp-digits\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n", "job.toml:2:1: data: model mlp-digits takes 64 dense features; the data has 13"},
		{"clip_norm", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n[optimizer]\nkind = \"adam\"\nlr = 0.001\nclip_norm = 5.0\n", "optimizer.clip_norm: not supported in distributed training yet"},
		{"model with clip_norm", "model = " + strconv.Quote(clipNormModel(t)) + "\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n", "sets optimizer.clip_norm = 2"},
		{"checkpoint dir a device", "model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 8\nsteps = 1\n[checkpoint]\ndir = \"/dev/null\"\nevery = 1\n", "job.toml:6:1: checkpoint.dir: /dev/null is not a directory"},
	} {
		t.Run(tc2.name, func(t *testing.T) {
			status, b := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(tc2.src))
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil || status != http.StatusBadRequest || !strings.Contains(e.Error, tc2.want) {
				t.Errorf("status %d, error %q (%v), want 400 with %q", status, e.Error, err, tc2.want)
			}
		})
	}
	var jobs []api.JobStatus
	tc.call("GET", "/v1/jobs", nil, http.StatusOK, &jobs)
	if len(jobs) != 0 {
		t.Errorf("refused jobs were kept: %+v", jobs)
	}
}

// A submission that names its file (api.JobFileParam) gets errors at that
// file's lines; a name that could forge a line of the message is refused
// before the job is read.
func TestBadJobFileErrorsNameTheSubmittedFile(t *testing.T) {
	tc := startCluster(t, nil)
	bad := []byte("model = \"ctrdnn\"\ndata = \"synthetic\"\nbatch = 0\nsteps = 1\n")
	for _, c := range []struct{ query, want string }{
		{"?file=jobs%2Fctr%20dnn.toml", "jobs/ctr dnn.toml:3:1: batch: must be in"},
		{"?file=", "query parameter file: 0 bytes"},
		{"?file=ctr.toml%0A2026%2F12%2F07%20coordinator%3A%20ok", "query parameter file: byte 9 is the control character"},
	} {
		status, b := tc.do("POST", "/v1/jobs"+c.query, api.ContentTypeTOML, bad)
		var e api.Error
		if err := json.Unmarshal(b, &e); err != nil || status != http.StatusBadRequest || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s: status %d, error %q (%v), want 400 with %q", c.query, status, e.Error, err, c.want)
		}
	}
}

// TestHTTPInputLimits: bodies are size-capped, JSON is strict, media types
// are checked, and each refusal is a 4xx with a message.
func TestHTTPInputLimits(t *testing.T) {
	// The node below never heartbeats on its own: keep it alive throughout.
	tc := startCluster(t, func(c *Config) { c.HeartbeatTimeout = patience })
	var reg api.RegisterResponse
	tc.call("POST", "/v1/nodes/register", newFakeNode("a", "cpu", 1, 7001).req, http.StatusOK, &reg)
	hb := "/v1/nodes/" + reg.NodeID + "/heartbeat"
	huge := bytes.Repeat([]byte(" "), api.MaxBodyBytes+1)
	for _, c := range []struct {
		name, method, path, ctype, body string
		status                          int
		want                            string
	}{
		{"unknown field", "POST", "/v1/nodes/register", api.ContentTypeJSON, `{"name":"b","data_addr":"127.0.0.1:1","type":"cpu","units":1,"colour":"red"}`, 400, "unknown field \"colour\""},
		{"trailing data", "POST", hb, api.ContentTypeJSON, `{"tasks":[]} {}`, 400, "data after the value"},
		{"not json", "POST", hb, api.ContentTypeJSON, `tasks: []`, 400, "bad JSON body"},
		{"wrong json type", "POST", hb, api.ContentTypeJSON, `{"tasks":{}}`, 400, "bad JSON body"},
		{"empty body", "POST", "/v1/nodes/register", api.ContentTypeJSON, ``, 400, "bad JSON body"},
		{"invalid registration", "POST", "/v1/nodes/register", api.ContentTypeJSON, `{"name":"b","data_addr":"nowhere","type":"cpu","units":1}`, 400, "data_addr: want host:port"},
		{"invalid report", "POST", hb, api.ContentTypeJSON, `{"tasks":[{"task_id":"x","state":"asleep"}]}`, 400, "state"},
		{"json media type for a job", "POST", "/v1/jobs", api.ContentTypeJSON, `{}`, 415, "want application/toml"},
		{"no media type for a job", "POST", "/v1/jobs", "", `model = "ctrdnn"`, 415, "want application/toml"},
		{"toml media type for a heartbeat", "POST", hb, api.ContentTypeTOML, `{"tasks":[]}`, 415, "want application/json"},
		{"huge heartbeat", "POST", hb, api.ContentTypeJSON, "{\"tasks\":[]}" + string(huge), 413, "body over"},
		{"huge job", "POST", "/v1/jobs", api.ContentTypeTOML, "# " + string(huge), 413, "body over"},
		{"resize not json", "PATCH", "/v1/jobs/j1", api.ContentTypeJSON, `replicas: [0]`, 400, "bad JSON body"},
		{"resize unknown field", "PATCH", "/v1/jobs/j1", api.ContentTypeJSON, `{"replicas":[0],"batches":[8],"colour":"red"}`, 400, "unknown field \"colour\""},
		{"resize invalid", "PATCH", "/v1/jobs/j1", api.ContentTypeJSON, `{"replicas":[0,1],"batches":[8]}`, 400, "resize: batches: 1 for 2 replicas"},
		{"resize of no such job", "PATCH", "/v1/jobs/nope", api.ContentTypeJSON, `{"replicas":[0],"batches":[8]}`, 404, "nope"},
		{"toml media type for a resize", "PATCH", "/v1/jobs/j1", api.ContentTypeTOML, `{"replicas":[0],"batches":[8]}`, 415, "want application/json"},
		{"huge resize", "PATCH", "/v1/jobs/j1", api.ContentTypeJSON, `{"replicas":[0],"batches":[8]}` + string(huge), 413, "body over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, b := tc.do(c.method, c.path, c.ctype, []byte(c.body))
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil || status != c.status || !strings.Contains(e.Error, c.want) {
				t.Errorf("status %d, body %.200s, want %d with %q", status, b, c.status, c.want)
			}
		})
	}
	if status, _ := tc.do("PUT", "/v1/jobs/j1", "", nil); status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: status %d, want 405", status)
	}
	// The node survived all of it.
	tc.call("POST", hb, api.Heartbeat{}, http.StatusOK, nil)
}

// TestGarbageNeverCrashes throws random and mangled bodies at every
// endpoint that takes one (registration, heartbeat, job, resize): every
// answer is a 4xx or a success, never a 5xx or a panic.
func TestGarbageNeverCrashes(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), QueueLength: 10000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	valid := []string{
		`{"name":"a","data_addr":"127.0.0.1:7001","type":"cpu","units":1,"gpus":[{"name":"g","memory_bytes":1}]}`,
		`{"tasks":[{"task_id":"j1.s0.r0","state":"done","step":3,"loss":0.5,"samples_per_s":10}]}`,
		`{"stage":0,"replicas":[0,1],"batches":[256,256],"add":[{"node":"a","batch":128}]}`,
		ctrJob,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		body := []byte(valid[r.IntN(len(valid))])
		for range r.IntN(4) {
			switch k := r.IntN(3); {
			case k == 0 && len(body) > 0:
				body[r.IntN(len(body))] = byte(r.IntN(256))
			case k == 1 && len(body) > 0:
				body = body[:r.IntN(len(body))]
			default:
				body = append(body, byte(r.IntN(256)))
			}
		}
		method, path, ctype := "POST", "/v1/nodes/register", api.ContentTypeJSON
		switch i % 4 {
		case 1:
			path = "/v1/nodes/n1/heartbeat"
		case 2:
			path, ctype = "/v1/jobs", api.ContentTypeTOML
		case 3:
			method, path = "PATCH", "/v1/jobs/j1"
		}
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		}
	}
}

// TestQueueFull: with the planner not running, submissions beyond the
// queue's length are refused with 503 rather than piling up.
func TestQueueFull(t *testing.T) {
	c, err := New(Config{Catalog: loadTestCatalog(t), QueueLength: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	post := func() int {
		req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(ctrJob))
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := post(); got != http.StatusCreated {
		t.Fatalf("first: %d", got)
	}
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("second: %d, want 503", got)
	}
}

// TestSignedAPI: with a control secret, an unsigned or wrongly signed
// request is refused with 401 before its body is decoded (a malformed job
// file gets 401, not 400); a signed one is served.
func TestSignedAPI(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	c, err := New(Config{Catalog: loadTestCatalog(t), ControlSecret: secret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	startedASecondAgo(c)
	h := c.Handler()
	post := func(body string, key []byte) (int, string) {
		req := httptest.NewRequest("POST", "/v1/jobs", strings.NewReader(body))
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		if key != nil {
			api.Sign(req, []byte(body), key, time.Now())
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("WWW-Authenticate")
	}
	if code, auth := post("not = [toml", nil); code != http.StatusUnauthorized || auth != api.AuthScheme {
		t.Errorf("unsigned: %d (WWW-Authenticate %q), want 401", code, auth)
	}
	if code, _ := post("not = [toml", api.ControlKey([]byte("another secret of enough bytes!!"))); code != http.StatusUnauthorized {
		t.Errorf("signed with another secret: %d, want 401", code)
	}
	if code, _ := post("not = [toml", api.ControlKey(secret)); code != http.StatusBadRequest {
		t.Errorf("signed malformed job: %d, want 400", code)
	}
	if code, _ := post(ctrJob, api.ControlKey(secret)); code != http.StatusCreated {
		t.Errorf("signed job: %d, want 201", code)
	}
}

// FuzzControlPlane feeds arbitrary bodies to the endpoints that decode
// untrusted input: nothing may panic or answer with a server error other
// than a full planning queue.
func FuzzControlPlane(f *testing.F) {
	f.Add(uint8(0), []byte(`{"name":"a","data_addr":"127.0.0.1:7001","type":"cpu","units":1}`))
	f.Add(uint8(1), []byte(`{"tasks":[{"task_id":"j1.s0.r0","state":"running","step":1,"loss":0.5,"samples_per_s":3}]}`))
	f.Add(uint8(2), []byte(ctrJob))
	f.Add(uint8(2), []byte("model = \"ctrdnn\"\n[optimizer]\nkind = \"sgd\"\n"))
	c, err := New(Config{Catalog: loadTestCatalog(f), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	h := c.Handler()
	f.Fuzz(func(t *testing.T, endpoint uint8, body []byte) {
		path, ctype := "/v1/nodes/register", api.ContentTypeJSON
		switch endpoint % 3 {
		case 1:
			path = "/v1/nodes/n1/heartbeat"
		case 2:
			path, ctype = "/v1/jobs", api.ContentTypeTOML
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d: %s", path, rec.Code, rec.Body)
		}
	})
}

// clipNormModel writes ctrdnn with clip_norm = 2 in its optimizer and
// returns the file's path.
func clipNormModel(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../config/examples/models/ctrdnn.toml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(src), "[optimizer]\n", "[optimizer]\nclip_norm = 2.0\n", 1)
	path := filepath.Join(t.TempDir(), "clip.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOversizeJobIsRefusedAtSubmission: a batch whose activations no live
// node can hold is refused with the numbers, before anything is placed.
func TestOversizeJobIsRefusedAtSubmission(t *testing.T) {
	tc := startCluster(t, nil)
	tc.start(newFakeNode("small", "cpu", 2, 7301)) // 1 GiB of memory
	status, body := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(strings.Replace(ctrJob, "batch = 512", "batch = 16777216", 1)))
	if status != http.StatusBadRequest || !strings.Contains(string(body), "batch") || !strings.Contains(string(body), "bytes") ||
		!strings.Contains(string(body), "small") {
		t.Fatalf("status %d: %s", status, body)
	}
	if status, body := tc.do("POST", "/v1/jobs", api.ContentTypeTOML, []byte(ctrJob)); status != http.StatusCreated {
		t.Errorf("a job that fits: status %d: %s", status, body)
	}
}
