package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// rooflineProblem is the problem the coordinator plans jobTOML on cat
// without any profile: roofline estimates at the default B_o.
func rooflineProblem(t *testing.T, jobTOML string, cat *config.Catalog) (*config.Job, *config.Model, *config.Problem) {
	t.Helper()
	jf, m := jobAndModel(t, jobTOML)
	p, err := JobProblem(jf, m, cat)
	if err != nil {
		t.Fatal(err)
	}
	return jf, m, p.Config()
}

// measuredBody is a profile as `heterps profile` would write it for the
// named types of cat, measured at B_o = bo, whose times are the roofline
// estimates times slow: at bo, oct and odt are roofline × slow × bo /
// (the roofline's B_o).
func measuredBody(t *testing.T, jobTOML string, cat *config.Catalog, slow float64, bo int, types ...string) []byte {
	t.Helper()
	_, _, p := rooflineProblem(t, jobTOML, onlyTypes(cat, types))
	scale := slow * float64(bo) / float64(p.ProfileBatch)
	for l := range p.Layers {
		for ty := range p.Types {
			p.Layers[l].OCT[ty] *= scale
			p.Layers[l].ODT[ty] *= scale
		}
	}
	p.ProfileBatch = bo
	src, err := p.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(fmt.Sprintf("# heterps profile --model ctrdnn, B_o = %d\n", bo)), src...)
}

// withDenseSync is profile body with type typ marked as having folded
// dense_sync method's synchronisation in, as heterps profile marks it.
func withDenseSync(t *testing.T, body []byte, typ, method string) []byte {
	t.Helper()
	p, err := config.ParseProblem("profile", body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Types {
		if p.Types[i].Name == typ {
			p.Types[i].DenseSync = method
		}
	}
	out, err := p.MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withMeasured is the roofline problem p with the named type's oct and
// odt multiplied by slow: what the coordinator should plan on once that
// type's profile (measuredBody) is stored.
func withMeasured(t *testing.T, p *config.Problem, slow float64, typ string) *sched.Problem {
	t.Helper()
	q := *p
	q.Layers = nil
	for _, l := range p.Layers {
		l.OCT, l.ODT = append([]float64(nil), l.OCT...), append([]float64(nil), l.ODT...)
		for ty, pt := range p.Types {
			if pt.Name == typ {
				l.OCT[ty] *= slow
				l.ODT[ty] *= slow
			}
		}
		q.Layers = append(q.Layers, l)
	}
	sp, err := sched.NewProblem(&q)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func (tc *testCluster) putProfile(model string, body []byte) (int, string) {
	tc.t.Helper()
	code, b := tc.do(http.MethodPut, "/v1/profiles/"+model, api.ContentTypeTOML, body)
	return code, string(b)
}

func (tc *testCluster) profiles() []api.Profile {
	tc.t.Helper()
	var ps []api.Profile
	tc.call(http.MethodGet, "/v1/profiles", nil, http.StatusOK, &ps)
	return ps
}

// TestProfilesAreStoredPerModelAndType: a PUT stores one record per type
// it measured (not those its header marks as estimated), GET lists them,
// a later PUT of a type replaces that type's only, and a model the
// coordinator does not know is stored by name, without a fingerprint.
func TestProfilesAreStoredPerModelAndType(t *testing.T) {
	tc := startCluster(t, nil)
	if ps := tc.profiles(); len(ps) != 0 {
		t.Fatalf("a new coordinator lists %+v", ps)
	}
	both := measuredBody(t, ctrJob, tc.cat, 1, 256, "cpu", "gpu")
	before := time.Now().Add(-time.Second)
	code, body := tc.putProfile("ctrdnn", both)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	var resp api.ProfilePutResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Stored) != 2 || resp.Model != "ctrdnn" {
		t.Fatalf("PUT answered %s (%v), want both types stored", body, err)
	}
	ps := tc.profiles()
	if len(ps) != 2 || ps[0].Type != "cpu" || ps[1].Type != "gpu" {
		t.Fatalf("listed %+v, want ctrdnn on cpu and gpu", ps)
	}
	for _, p := range ps {
		if p.Model != "ctrdnn" || p.Layers != 7 || p.ProfileBatch != 256 || p.Fingerprint == "" || p.StoredAt.Before(before) {
			t.Errorf("listed %+v, want ctrdnn, 7 layers, B_o 256, a fingerprint, stored now", p)
		}
	}
	gpuAt := ps[1].StoredAt

	// The cpu column again at another B_o, its header saying gpu is a
	// roofline estimate: cpu is replaced, gpu kept as it was.
	again := append([]byte(config.ProfileEstimatedPrefix+"gpu\n"), measuredBody(t, ctrJob, tc.cat, 2, 512, "cpu", "gpu")...)
	code, body = tc.putProfile("ctrdnn", again)
	if code != http.StatusOK {
		t.Fatalf("second PUT: %d %s", code, body)
	}
	resp = api.ProfilePutResponse{}
	json.Unmarshal([]byte(body), &resp)
	if len(resp.Stored) != 1 || resp.Stored[0].Type != "cpu" || len(resp.Estimated) != 1 || resp.Estimated[0] != "gpu" {
		t.Fatalf("second PUT answered %s, want cpu stored and gpu named estimated", body)
	}
	ps = tc.profiles()
	if len(ps) != 2 || ps[0].ProfileBatch != 512 || ps[1].ProfileBatch != 256 || !ps[1].StoredAt.Equal(gpuAt) {
		t.Fatalf("after replacing cpu: %+v, want cpu at 512 and gpu untouched at 256", ps)
	}
	if got := tc.c.storedProfiles("ctrdnn")["cpu"]; math.Abs(got.Layers[2].OCT-2*512*mustLayerOCT(t, ctrJob, tc.cat, 2)/1024) > 1e-12 {
		t.Errorf("cpu layer 2 oct stored as %g", got.Layers[2].OCT)
	}

	// A model the coordinator cannot load: stored by name, no fingerprint.
	mine := measuredBody(t, strings.Replace(ctrJob, "ctrdnn", "mlp-digits", 1), tc.cat, 1, 64, "cpu")
	if code, body := tc.putProfile("my-model.v2", mine); code != http.StatusOK {
		t.Fatalf("PUT of an unknown model: %d %s", code, body)
	}
	ps = tc.profiles()
	if len(ps) != 3 || ps[2].Model != "my-model.v2" || ps[2].Layers != 4 || ps[2].Fingerprint != "" {
		t.Fatalf("listed %+v, want my-model.v2 on cpu, 4 layers, no fingerprint", ps)
	}
	var gone []api.Profile
	tc.call(http.MethodDelete, "/v1/profiles/ctrdnn/gpu", nil, http.StatusOK, &gone)
	if len(gone) != 1 || gone[0].Type != "gpu" || len(tc.profiles()) != 2 {
		t.Errorf("DELETE ctrdnn/gpu forgot %+v, left %+v", gone, tc.profiles())
	}
	tc.call(http.MethodDelete, "/v1/profiles/ctrdnn/gpu", nil, http.StatusNotFound, nil)
}

func mustLayerOCT(t *testing.T, jobTOML string, cat *config.Catalog, layer int) float64 {
	_, _, p := rooflineProblem(t, jobTOML, onlyTypes(cat, []string{"cpu"}))
	return p.Layers[layer].OCT[0]
}

// TestJobPlansOnTheStoredProfileOfItsModel: with a measured profile of
// ctrdnn stored for cpu only, a ctrdnn job whose file names no profile is
// planned with cpu's layer times from it (10× faster than the roofline
// here, which makes an all-cpu plan) and gpu's from the roofline; the
// plan says so per type, and its stages' predicted throughput and its
// cost are what those numbers give.
func TestJobPlansOnTheStoredProfileOfItsModel(t *testing.T) {
	tc := startCluster(t, nil)
	const fast = 0.1
	body := withDenseSync(t, measuredBody(t, ctrJob, tc.cat, fast, 256, "cpu"), "cpu", "allreduce")
	if code, body := tc.putProfile("ctrdnn", body); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	_, _, roof := rooflineProblem(t, ctrJob, tc.cat)
	want := withMeasured(t, roof, fast, "cpu")
	estimated, err := sched.NewProblem(roof)
	if err != nil {
		t.Fatal(err)
	}
	wantLimit, err := sched.AutoLimit(want.Config())
	if err != nil {
		t.Fatal(err)
	}
	want.ThroughputLimit = wantLimit
	expected, err := sched.Run(context.Background(), "exact", want, sched.Options{Seed: 3})
	if err != nil || !expected.Feasible {
		t.Fatalf("expected plan: %v %+v", err, expected)
	}
	tc.nodesFor(expected)
	tc.start(newFakeNode("gpu-idle", "gpu", 1, 9100)) // gpu is live too, planned on its roofline estimate
	s := tc.waitJob(tc.submit(ctrJob))
	if s.State != api.JobDone {
		t.Fatalf("job: %s (%s)", s.State, s.Reason)
	}
	plan := new(planOf(t, s))
	if plan.Sources["cpu"] != sched.SourceMeasured || plan.Sources["gpu"] != sched.SourceEstimated || len(plan.Sources) != 2 {
		t.Errorf("sources %v, want cpu measured and gpu estimated", plan.Sources)
	}
	if plan.DenseSync["cpu"] != config.DenseSyncAllreduce || len(plan.DenseSync) != 1 {
		t.Errorf("plan's dense_sync %v, want the stored profile's allreduce for cpu alone", plan.DenseSync)
	}
	cost, err := sched.Recost(plan, want)
	if err != nil || math.Abs(cost.Cost-plan.Cost) > 1e-9*plan.Cost {
		t.Errorf("plan cost %g, the measured cpu columns give %g (%v)", plan.Cost, cost.Cost, err)
	}
	if roofCost, err := sched.Recost(plan, estimated); err == nil && math.Abs(roofCost.Cost-plan.Cost) < 1e-3*plan.Cost {
		t.Errorf("plan cost %g is the roofline's (%g): the stored profile was not used", plan.Cost, roofCost.Cost)
	}
	sawCPU := false
	for i, st := range s.Stages {
		ty, _ := want.TypeIndex(st.Type)
		seg := sched.Segment{First: st.FirstLayer, Last: st.LastLayer, Type: ty, Units: st.Units}
		x := want.StageThroughput(seg)
		if math.Abs(st.PredictedThroughput-x) > 1e-9*x {
			t.Errorf("stage %d (%s): predicted %g samples/s, the stored profile gives %g", i, st.Type, st.PredictedThroughput, x)
		}
		if st.Type == "cpu" {
			sawCPU = true
			if r := estimated.StageThroughput(seg); math.Abs(r-x) < 1e-3*x {
				t.Errorf("stage %d: the roofline predicts %g too: the test proves nothing", i, r)
			}
		}
	}
	if !sawCPU {
		t.Errorf("no cpu stage in %+v", s.Stages)
	}
}

// TestStoredProfileIsRescaledToTheProblemsProfileBatch: a profile
// measured at B_o = 256 plans exactly as the same times measured at the
// problem's own B_o (1024, four times the times) do.
func TestStoredProfileIsRescaledToTheProblemsProfileBatch(t *testing.T) {
	tc := startCluster(t, nil)
	jf, m, roof := rooflineProblem(t, ctrJob, tc.cat)
	if roof.ProfileBatch != 1024 {
		t.Fatalf("the roofline's B_o is %d; the test assumes 1024", roof.ProfileBatch)
	}
	problemAt := func(bo int) (*sched.Problem, *sched.Plan) {
		t.Helper()
		if code, body := tc.putProfile("ctrdnn", measuredBody(t, ctrJob, tc.cat, 0.1, bo, "cpu", "gpu")); code != http.StatusOK {
			t.Fatalf("PUT at B_o %d: %d %s", bo, code, body)
		}
		p, src, err := jobProblem(jf, m, tc.cat, tc.c.storedProfiles("ctrdnn"))
		if err != nil {
			t.Fatal(err)
		}
		if src.types["cpu"] != sched.SourceMeasured || src.types["gpu"] != sched.SourceMeasured {
			t.Fatalf("B_o %d: sources %v", bo, src.types)
		}
		plan, err := sched.Run(context.Background(), "exact", p, sched.Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return p, plan
	}
	p256, plan256 := problemAt(256)
	p1024, plan1024 := problemAt(1024)
	if p256.ProfileBatch != p1024.ProfileBatch {
		t.Fatalf("B_o %g and %g", p256.ProfileBatch, p1024.ProfileBatch)
	}
	for l := range p256.Layers {
		for ty := range p256.Types {
			a, b := p256.Layers[l], p1024.Layers[l]
			if math.Abs(a.OCT[ty]-b.OCT[ty]) > 1e-12*b.OCT[ty] || math.Abs(a.ODT[ty]-b.ODT[ty]) > 1e-12*b.ODT[ty] {
				t.Errorf("layer %d type %d: oct/odt %g/%g from B_o 256, %g/%g from B_o 1024", l, ty, a.OCT[ty], a.ODT[ty], b.OCT[ty], b.ODT[ty])
			}
		}
	}
	if !samePlan(plan256, plan1024) || math.Abs(plan256.Cost-plan1024.Cost) > 1e-12*plan1024.Cost {
		t.Errorf("plan from B_o 256 %v %v cost %g, from B_o 1024 %v %v cost %g", plan256.Assign, stageUnits(plan256), plan256.Cost,
			plan1024.Assign, stageUnits(plan1024), plan1024.Cost)
	}
	// The same numbers through a job file's profile at B_o 1024 plan the same.
	path := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(path, measuredBody(t, ctrJob, tc.cat, 0.1, 1024, "cpu", "gpu"), 0o600); err != nil {
		t.Fatal(err)
	}
	pf, err := JobProblem(withProfileFile(t, jf, path), m, tc.cat)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := sched.Run(context.Background(), "exact", pf, sched.Options{Seed: 3})
	if err != nil || !samePlan(fromFile, plan256) || math.Abs(fromFile.Cost-plan256.Cost) > 1e-12*plan256.Cost {
		t.Errorf("the job file's profile plans %v cost %g (%v), the stored one rescaled %v cost %g", fromFile.Assign, fromFile.Cost, err, plan256.Assign, plan256.Cost)
	}
}

func withProfileFile(t *testing.T, jf *config.Job, path string) *config.Job {
	t.Helper()
	out, err := config.ParseJob("job.toml", []byte(withProfile(ctrJob, path)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJobFileProfileWinsOverTheStore: a job whose file names a profile is
// planned on that file, whatever the store holds for its model.
func TestJobFileProfileWinsOverTheStore(t *testing.T) {
	tc := startCluster(t, nil)
	if code, body := tc.putProfile("ctrdnn", measuredBody(t, ctrJob, tc.cat, 0.1, 256, "cpu", "gpu")); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	path := writeProfile(t, ctrJob, tc.cat, 7, 256, "cpu", "gpu")
	jf, m, _ := rooflineProblem(t, withProfile(ctrJob, path), tc.cat)
	fromFile, err := JobProblem(jf, m, tc.cat)
	if err != nil {
		t.Fatal(err)
	}
	got, src, err := jobProblem(jf, m, tc.cat, tc.c.storedProfiles("ctrdnn"))
	if err != nil {
		t.Fatal(err)
	}
	for l := range got.Layers {
		for ty := range got.Types {
			if got.Layers[l].OCT[ty] != fromFile.Layers[l].OCT[ty] {
				t.Fatalf("layer %d type %d: oct %g, the job's profile file says %g", l, ty, got.Layers[l].OCT[ty], fromFile.Layers[l].OCT[ty])
			}
		}
	}
	if src.types["cpu"] != sched.SourceMeasured || src.types["gpu"] != sched.SourceMeasured {
		t.Errorf("sources %v, want both measured (the job's file)", src.types)
	}
}

// TestStoredProfileOfOtherLayersIsNotUsed: a stored profile whose layer
// count or layer shapes differ from the job's model is passed over, with
// the reason, and the type is estimated.
func TestStoredProfileOfOtherLayersIsNotUsed(t *testing.T) {
	tc := startCluster(t, nil)
	dir := t.TempDir()
	_, zoo, err := config.ReadExample(config.ExampleModels, "ctrdnn")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, src []byte) string {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, src, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// A model the coordinator does not know, profiled with 4 layers: its
	// 7-layer jobs plan on the roofline.
	mine := write("mine", bytes.Replace(zoo, []byte(`name = "ctrdnn"`), []byte(`name = "mine"`), 1))
	if code, body := tc.putProfile("mine", measuredBody(t, strings.Replace(ctrJob, "ctrdnn", "mlp-digits", 1), tc.cat, 1, 64, "cpu")); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// A file that calls itself ctrdnn but has a larger vocabulary than the zoo's.
	wide := bytes.Replace(zoo, []byte("vocab = 1000001"), []byte("vocab = 2000001"), 1)
	if bytes.Equal(wide, zoo) {
		t.Fatal("the zoo's ctrdnn has no `vocab = 1000001` line to change")
	}
	other := write("ctrdnn", wide)
	if code, body := tc.putProfile("ctrdnn", measuredBody(t, ctrJob, tc.cat, 0.1, 256, "cpu")); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for _, c := range []struct{ model, name, why string }{
		{mine, "mine", "has 4 layers, the job plans 7"},
		{other, "ctrdnn", "other layer shapes"},
	} {
		jf, err := config.ParseJob("job.toml", []byte(strings.Replace(ctrJob, `"ctrdnn"`, fmt.Sprintf("%q", c.model), 1)))
		if err != nil {
			t.Fatal(err)
		}
		m, err := config.LoadModel(jf.Model)
		if err != nil {
			t.Fatal(err)
		}
		_, src, err := jobProblem(jf, m, tc.cat, tc.c.storedProfiles(c.name))
		if err != nil {
			t.Fatal(err)
		}
		if src.types["cpu"] != sched.SourceEstimated || len(src.skipped) != 1 || !strings.Contains(src.skipped[0], c.why) {
			t.Errorf("model %s: sources %v, skipped %q; want cpu estimated because it %s", c.name, src.types, src.skipped, c.why)
		}
	}
	// The zoo's own ctrdnn does plan on its stored profile.
	jf, m, _ := rooflineProblem(t, ctrJob, tc.cat)
	if _, src, err := jobProblem(jf, m, tc.cat, tc.c.storedProfiles("ctrdnn")); err != nil || src.types["cpu"] != sched.SourceMeasured {
		t.Errorf("zoo ctrdnn: sources %v (%v), want cpu measured", src.types, err)
	}
}

// TestStoredProfilesSurviveARestart: profiles stored with one coordinator
// are listed by the next one on the same state directory, which plans on
// them.
func TestStoredProfilesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Catalog: loadTestCatalog(t), StateDir: dir, Logger: slog.New(slog.DiscardHandler)}
	c, stop := runCoordinator(t, cfg)
	req := httptest.NewRequest(http.MethodPut, "/v1/profiles/ctrdnn", bytes.NewReader(measuredBody(t, ctrJob, cfg.Catalog, 0.1, 256, "cpu")))
	req.Header.Set("Content-Type", api.ContentTypeTOML)
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	first := c.listProfiles()
	stop() // Run closes the state database

	tc := startCluster(t, func(c *Config) { c.StateDir = dir })
	ps := tc.profiles()
	if len(ps) != 1 || len(first) != 1 || ps[0].Model != first[0].Model || ps[0].Type != first[0].Type || ps[0].Layers != first[0].Layers ||
		ps[0].ProfileBatch != first[0].ProfileBatch || ps[0].Fingerprint != first[0].Fingerprint || !ps[0].StoredAt.Equal(first[0].StoredAt) {
		t.Fatalf("after the restart: %+v, before: %+v", ps, first)
	}
	_, _, roof := rooflineProblem(t, ctrJob, tc.cat)
	want := withMeasured(t, roof, 0.1, "cpu")
	want.ThroughputLimit, _ = sched.AutoLimit(want.Config())
	expected, err := sched.Run(context.Background(), "exact", want, sched.Options{Seed: 3})
	if err != nil || !expected.Feasible {
		t.Fatalf("expected plan: %v %+v", err, expected)
	}
	tc.nodesFor(expected)
	s := tc.waitJob(tc.submit(ctrJob))
	if plan := planOf(t, s); s.State != api.JobDone || plan.Sources["cpu"] != sched.SourceMeasured {
		t.Fatalf("job %s (%s), sources %v: want done, cpu measured", s.State, s.Reason, plan.Sources)
	}
}

// TestBadProfilesAreRefused: a profile body that is too big, not a problem
// file, has a NaN, negative or out-of-range value, an unknown field, the
// wrong layers for a model the coordinator knows, or the wrong media type
// is refused with the reason (the field, model, type and layer where
// there is one), and nothing is stored.
func TestBadProfilesAreRefused(t *testing.T) {
	tc := startCluster(t, nil)
	good := string(measuredBody(t, ctrJob, tc.cat, 1, 256, "cpu"))
	_, _, roof := rooflineProblem(t, ctrJob, onlyTypes(tc.cat, []string{"cpu"}))
	oct2 := fmt.Sprintf("oct = [%v]", roof.Layers[2].OCT[0]*256/1024)
	if !strings.Contains(good, oct2) {
		t.Fatalf("no %q in\n%s", oct2, good)
	}
	replaceOnce := func(old, new string) []byte {
		if !strings.Contains(good, old) {
			t.Fatalf("no %q in the profile", old)
		}
		return []byte(strings.Replace(good, old, new, 1))
	}
	mlp := measuredBody(t, strings.Replace(ctrJob, "ctrdnn", "mlp-digits", 1), tc.cat, 1, 256, "cpu")
	for _, c := range []struct {
		name, model, contentType string
		body                     []byte
		code                     int
		want                     []string
	}{
		{"oversize", "ctrdnn", api.ContentTypeTOML, append([]byte(good), bytes.Repeat([]byte("#"), api.MaxProfileBytes)...), http.StatusRequestEntityTooLarge, []string{"body over 4194304 bytes"}},
		{"NaN", "ctrdnn", api.ContentTypeTOML, replaceOnce(oct2, "oct = [nan]"), http.StatusBadRequest, []string{"profile of model ctrdnn", "layer[2].oct", `type "cpu"`, "NaN"}},
		{"negative odt", "ctrdnn", api.ContentTypeTOML, replaceOnce("odt = [", "odt = [-"), http.StatusBadRequest, []string{"layer[0].odt", `type "cpu"`, ">= 0"}},
		{"alpha above 1", "ctrdnn", api.ContentTypeTOML, replaceOnce("alpha = [", "alpha = [1"), http.StatusBadRequest, []string{"layer[0].alpha", "in [-10, 1]"}},
		{"unknown field", "ctrdnn", api.ContentTypeTOML, replaceOnce("oct = [", "octt = 1\noct = ["), http.StatusBadRequest, []string{"layer.octt", "unknown key"}},
		{"layer count", "ctrdnn", api.ContentTypeTOML, mlp, http.StatusBadRequest, []string{"profile of model ctrdnn, type cpu", "layer", "4 layers, model ctrdnn has 7"}},
		{"layer name", "ctrdnn", api.ContentTypeTOML, replaceOnce(`name = 'fc2'`, `name = 'fc9'`), http.StatusBadRequest, []string{"type cpu", "layer[3].name", `"fc9"`, `"fc2"`}},
		{"towers", "matchnet", api.ContentTypeTOML, []byte(good), http.StatusBadRequest, []string{"towers"}},
		{"model name", "-bad", api.ContentTypeTOML, []byte(good), http.StatusBadRequest, []string{"not a model name"}},
		{"media type", "ctrdnn", api.ContentTypeJSON, []byte(good), http.StatusUnsupportedMediaType, []string{"application/toml"}},
		{"all estimated", "ctrdnn", api.ContentTypeTOML, append([]byte(config.ProfileEstimatedPrefix+"cpu\n"), good...), http.StatusBadRequest, []string{"nothing measured"}},
	} {
		code, body := tc.do(http.MethodPut, "/v1/profiles/"+c.model, c.contentType, c.body)
		var e api.Error
		json.Unmarshal(body, &e)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("%s: error %q lacks %q", c.name, e.Error, w)
			}
		}
	}
	if ps := tc.profiles(); len(ps) != 0 {
		t.Errorf("stored after refusals: %+v", ps)
	}
	if code, body := tc.putProfile("ctrdnn", []byte(good)); code != http.StatusOK {
		t.Errorf("the good profile: %d %s", code, body)
	}
}

// TestProfilesNeedASignatureAndCannotBeReplayed: with a cluster secret, an
// unsigned PUT or GET is refused (401) before its body is parsed, a signed
// one stores, and the same signed request sent again is refused as a
// replay.
func TestProfilesNeedASignatureAndCannotBeReplayed(t *testing.T) {
	c, key := newSignedCoordinator(t)
	h := c.Handler()
	body := measuredBody(t, ctrJob, c.cfg.Catalog, 1, 256, "cpu")
	send := func(s signedRequest) (int, string) {
		req := httptest.NewRequest(s.method, s.path, bytes.NewReader(s.body))
		req.Header.Set("Content-Type", api.ContentTypeTOML)
		if s.auth != "" {
			req.Header.Set("Authorization", s.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e api.Error
		json.Unmarshal(rec.Body.Bytes(), &e)
		return rec.Code, e.Error
	}
	bad := []byte(strings.Replace(string(body), "alpha = [", "alpha = [7", 1))
	for _, s := range []signedRequest{
		{method: http.MethodPut, path: "/v1/profiles/ctrdnn", body: body},
		{method: http.MethodPut, path: "/v1/profiles/ctrdnn", body: bad}, // refused for its signature, not its alpha
		{method: http.MethodGet, path: "/v1/profiles"},
	} {
		if code, msg := send(s); code != http.StatusUnauthorized || strings.Contains(msg, "alpha") {
			t.Errorf("unsigned %s %s: %d %q, want 401", s.method, s.path, code, msg)
		}
	}
	if ps := c.listProfiles(); len(ps) != 0 {
		t.Fatalf("stored unsigned: %+v", ps)
	}
	put := sign(http.MethodPut, "/v1/profiles/ctrdnn", body, key)
	if code, msg := send(put); code != http.StatusOK {
		t.Fatalf("signed PUT: %d %s", code, msg)
	}
	stored := c.listProfiles()
	if len(stored) != 1 {
		t.Fatalf("stored %+v", stored)
	}
	if code, msg := send(put); code != http.StatusUnauthorized || !strings.Contains(msg, "replayed request") {
		t.Errorf("replayed PUT: %d %q, want 401 replayed request", code, msg)
	}
	if ps := c.listProfiles(); len(ps) != 1 || !ps[0].StoredAt.Equal(stored[0].StoredAt) {
		t.Errorf("the replay stored again: %+v", ps)
	}
	if code, msg := send(sign(http.MethodGet, "/v1/profiles", nil, key)); code != http.StatusOK {
		t.Errorf("signed GET: %d %s", code, msg)
	}
}
