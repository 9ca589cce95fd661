package coord

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
)

// writeProfile writes, as `heterps profile` would, the roofline problem of
// jobTOML's model on cat with every layer's oct and odt multiplied by slow
// and B_o set to bo, keeping only the named types; it returns the path.
func writeProfile(t *testing.T, jobTOML string, cat *config.Catalog, slow float64, bo int, types ...string) string {
	t.Helper()
	jf, m := jobAndModel(t, jobTOML)
	p, err := JobProblem(jf, m, onlyTypes(cat, types))
	if err != nil {
		t.Fatal(err)
	}
	for l := range p.Layers {
		for ty := range p.Types {
			p.Layers[l].OCT[ty] *= slow
			p.Layers[l].ODT[ty] *= slow
		}
	}
	p.ProfileBatch = float64(bo)
	src, err := p.Config().MarshalTOML()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profile.toml")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func withProfile(jobTOML, path string) string { return jobTOML + fmt.Sprintf("profile = %q\n", path) }

// TestJobPlansOnItsProfile: a job with a profile is planned, and its
// stages' predicted throughput reported, from the profile's layer times,
// so that a stage's measured/predicted ratio compares the run with the
// profile, not with the catalog's roofline.
func TestJobPlansOnItsProfile(t *testing.T) {
	tc := startCluster(t, nil)
	const slow = 7
	path := writeProfile(t, ctrJob, tc.cat, slow, 256, "cpu", "gpu")
	job := withProfile(ctrJob, path)
	pf, err := config.LoadProblem(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sched.NewProblem(pf)
	if err != nil {
		t.Fatal(err)
	}
	want.Batch = 512 // the job's batch over the profile's B_o
	roofline := tc.expectedPlan(ctrJob)
	plan := tc.expectedPlan(job)
	tc.nodesFor(plan)
	s := tc.waitJob(tc.submit(job))
	if s.State != api.JobDone {
		t.Fatalf("job: %s (%s)", s.State, s.Reason)
	}
	if len(s.Stages) != len(plan.Stages) {
		t.Fatalf("%d stages in status, plan has %d", len(s.Stages), len(plan.Stages))
	}
	for i, st := range s.Stages {
		ty, _ := want.TypeIndex(st.Type)
		x := want.StageThroughput(sched.Segment{First: st.FirstLayer, Last: st.LastLayer, Type: ty, Units: st.Units})
		if math.Abs(st.PredictedThroughput-x) > 1e-9*x {
			t.Errorf("stage %d: predicted %g samples/s, the profile gives %g", i, st.PredictedThroughput, x)
		}
		if st.MeasuredThroughput <= 0 {
			t.Errorf("stage %d: nothing measured", i)
		}
	}
	if s.Stages[0].PredictedThroughput >= roofline.Stages[0].Throughput/2 && len(roofline.Stages) == len(plan.Stages) {
		t.Errorf("predicted %g samples/s, the roofline %g: the profile (%g× slower) was not used",
			s.Stages[0].PredictedThroughput, roofline.Stages[0].Throughput, float64(slow))
	}
}

// TestProfileMustCoverTheLiveTypes: a profile without a type the live nodes
// offer fails the job naming the type and the file.
func TestProfileMustCoverTheLiveTypes(t *testing.T) {
	tc := startCluster(t, nil)
	path := writeProfile(t, ctrJob, tc.cat, 1, 256, "cpu")
	tc.start(newFakeNode("cpu-a", "cpu", 2, 7300))
	tc.start(newFakeNode("gpu-a", "gpu", 4, 7301))
	s := tc.waitJob(tc.submit(withProfile(ctrJob, path)))
	if s.State != api.JobFailed || !strings.Contains(s.Reason, "has no type gpu") || !strings.Contains(s.Reason, path) {
		t.Fatalf("job %s: %q, want a failure naming type gpu and %s", s.State, s.Reason, path)
	}
}

// TestSubmissionChecksTheProfile: a missing profile, or one of another
// model, is refused at submission at the profile line.
func TestSubmissionChecksTheProfile(t *testing.T) {
	tc := startCluster(t, nil)
	other := writeProfile(t, strings.Replace(ctrJob, "ctrdnn", "mlp-digits", 1), tc.cat, 1, 256, "cpu", "gpu")
	for _, c := range []struct{ path, want string }{
		{filepath.Join(t.TempDir(), "none.toml"), "no such file"},
		{other, "has 4 layers, model ctrdnn plans 7"},
	} {
		code, body := tc.do(http.MethodPost, "/v1/jobs", api.ContentTypeTOML, []byte(withProfile(ctrJob, c.path)))
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.want) || !strings.Contains(string(body), "profile") {
			t.Errorf("profile %s: %d %s, want 400 with %q", c.path, code, body, c.want)
		}
	}
}

// A job file's profile carries each measured type's folded dense_sync into
// the problem and the plan's sources; types without one have none.
func TestJobFileProfileCarriesItsDenseSync(t *testing.T) {
	cat := loadTestCatalog(t)
	_, _, p := rooflineProblem(t, ctrJob, cat)
	pf := *p
	pf.Types = append([]config.ProblemType(nil), p.Types...)
	for i := range pf.Types {
		if pf.Types[i].Name == "cpu" {
			pf.Types[i].DenseSync = config.DenseSyncPS
		}
	}
	if err := applyProfile(p, &pf, "p.toml"); err != nil {
		t.Fatal(err)
	}
	byType := sched.MeasuredDenseSync(p, sourcesOf(p, []string{"cpu", "gpu"}))
	if len(byType) != 1 || byType["cpu"] != config.DenseSyncPS {
		t.Errorf("dense_sync by type %v, want cpu: ps alone", byType)
	}
	if none := sched.MeasuredDenseSync(p, sourcesOf(p, nil)); none != nil {
		t.Errorf("estimated types carry a dense_sync: %v", none)
	}
}
