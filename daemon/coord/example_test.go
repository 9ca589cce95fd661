package coord

import (
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
)

// TestExampleJobOnLocalCatalog runs the example job of `heterps run` on the
// local catalog, with one fake registration per node and type that the
// catalog's [[node]] entries offer (a registration offers one type, so a
// machine offering two registers twice, as "<node>.<type>").
func TestExampleJobOnLocalCatalog(t *testing.T) {
	cat, err := config.LoadCatalog("../../config/examples/catalogs/local.toml")
	if err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, func(c *Config) { c.Catalog = cat })
	tc.cat = cat
	for _, n := range cat.Nodes {
		for _, typ := range slices.Sorted(maps.Keys(n.Units)) {
			f := newFakeNode(n.Name+"."+typ, typ, n.Units[typ], 7000)
			f.req.DataAddr = n.Address
			f.stride = 25
			tc.start(f)
		}
	}
	src, err := os.ReadFile("../../config/examples/jobs/ctrdnn-local.toml")
	if err != nil {
		t.Fatal(err)
	}
	plan := tc.expectedPlan(string(src))
	s := tc.waitJob(tc.submit(string(src)))
	if s.State != api.JobDone || s.Step != s.Steps || len(s.Stages) != len(plan.Stages) || len(s.PS) != max(1, plan.PSCores) {
		t.Errorf("example job: %s (%s), step %d of %d, %d stages and %d PS shards; plan %+v", s.State, s.Reason, s.Step, s.Steps, len(s.Stages), len(s.PS), plan)
	}
}
