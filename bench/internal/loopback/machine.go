package loopback

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/heterps/heterps/bench/internal/planlimit"
	"github.com/heterps/heterps/config"
)

// Build builds heterps and heterpsd from the tree in the working directory
// (the repository root) into dir and returns heterpsd's path.
func Build(ctx context.Context, dir string) (string, error) {
	heterpsd := filepath.Join(dir, "heterpsd")
	for _, t := range []struct{ out, pkg string }{{filepath.Join(dir, "heterps"), "./tools/heterps"}, {heterpsd, "./daemon/cmd/heterpsd"}} {
		out, err := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go build %s (run this from the repository root): %w\n%s", t.pkg, err, out)
		}
	}
	return heterpsd, nil
}

// Catalog is a catalog named name of one type, unit, with n units on n
// nodes of one unit each (the addresses are only validated: nodes listen
// where their node files say).
func Catalog(name string, unit config.CatalogType, n int) *config.Catalog {
	unit.MaxUnits = n
	cat := &config.Catalog{Version: 1, Name: name, Types: []config.CatalogType{unit}}
	for i := range n {
		cat.Nodes = append(cat.Nodes, config.CatalogNode{Name: fmt.Sprintf("n%d", i),
			Address: fmt.Sprintf("127.0.0.1:%d", 7100+i), Units: map[string]int{unit.Name: 1}})
	}
	return cat
}

// Setup is what a benchmark's runs share: the daemon binary, the catalog
// file's text and the throughput floor that plans the job on the units
// wanted.
type Setup struct {
	Heterpsd string
	Catalog  []byte
	Limit    float64
}

// Prepare builds the binaries into dir, writes a catalog of nodes nodes of
// catalogPath's type unitType, and finds the floor at which the exact plan
// of the model on data puts one stage on jobUnits of them.
func Prepare(ctx context.Context, dir, catalogPath, unitType, name, model, data string, nodes, jobUnits, batch, steps int) (Setup, error) {
	var s Setup
	var err error
	if s.Heterpsd, err = Build(ctx, dir); err != nil {
		return s, err
	}
	cat, err := TypeCatalog(catalogPath, unitType, name, nodes)
	if err != nil {
		return s, err
	}
	if s.Catalog, err = cat.MarshalTOML(); err != nil {
		return s, fmt.Errorf("catalog: %w", err)
	}
	s.Limit, err = Limit(ctx, cat, model, data, jobUnits, batch, steps)
	return s, err
}

// TypeCatalog is the catalog named name of nodes nodes of one unit each of
// catalogPath's type unitType.
func TypeCatalog(catalogPath, unitType, name string, nodes int) (*config.Catalog, error) {
	base, err := config.LoadCatalog(catalogPath)
	if err != nil {
		return nil, err
	}
	unit, ok := base.Type(unitType)
	if !ok {
		return nil, fmt.Errorf("%s has no type %s", catalogPath, unitType)
	}
	return Catalog(name, unit, nodes), nil
}

// Limit is the throughput floor at which the exact plan of model (a zoo
// name or a model file) on data puts one stage on jobUnits units of cat.
func Limit(ctx context.Context, cat *config.Catalog, model, data string, jobUnits, batch, steps int) (float64, error) {
	m, err := config.LoadModel(model)
	if err != nil {
		return 0, err
	}
	limit, err := planlimit.For(ctx, cat, m, model, data, jobUnits, batch, steps)
	if err != nil {
		return 0, fmt.Errorf("plan %s on %s over %d units: %w", model, data, jobUnits, err)
	}
	return limit, nil
}
