package coord

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/sched"
	"github.com/heterps/heterps/daemon/store"
)

// Stored measured profiles. `heterps profile --submit` sends the problem
// file it measured to PUT /v1/profiles/{model}; the coordinator keeps one
// record per (model, type) it measured — per layer oct, odt, alpha and
// beta, the profile's B_o, the model's layer-shape fingerprint when the
// model is one of the zoo's, the time it was stored — in its state
// database, and plans every job of that model whose file names no profile
// on the stored columns of the live types that have one (rescaled to the
// problem's B_o), keeping the roofline estimate for the others. The plan's
// sources say which types were measured. A job file's own `profile` wins:
// it keeps its strict behaviour (profile.go) and the store is not looked at.

// MaxStoredProfiles bounds the (model, type) records the coordinator keeps.
const MaxStoredProfiles = 4096

// profileSet is one model's stored profiles, by type name.
type profileSet map[string]store.Profile

// identifierName is what model and type names look like (config's rule).
var identifierName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._\-]*$`)

// shapesFingerprint identifies a model's layer shapes: names, kinds,
// towers, widths and weight counts, in order.
func shapesFingerprint(shapes []config.LayerShape) string {
	h := sha256.New()
	for _, s := range shapes {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%d\x00%d\n", s.Name, s.Kind, s.Tower, s.In, s.Weights, s.Out)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// zooModel is the zoo's model of that name, or nil when the zoo has none:
// the coordinator resolves profile names against its built-in models only,
// never against its own files.
func zooModel(name string) (*config.Model, error) {
	if !slices.Contains(config.ZooNames(), name) {
		return nil, nil
	}
	label, src, err := config.ReadExample(config.ExampleModels, name)
	if err != nil {
		return nil, err
	}
	return config.ParseModel(label, src)
}

// loadProfiles takes up the stored profiles at start-up.
func (c *Coordinator) loadProfiles(ps []store.Profile) {
	c.profMu.Lock()
	defer c.profMu.Unlock()
	for _, p := range ps {
		c.profiles[store.ProfileKey(p.Model, p.Type)] = p
	}
}

// storedProfiles is a copy of model's stored profiles. It takes only
// c.profMu, so it may be called with or without c.mu held.
func (c *Coordinator) storedProfiles(model string) profileSet {
	c.profMu.Lock()
	defer c.profMu.Unlock()
	var set profileSet
	for _, p := range c.profiles {
		if p.Model == model {
			if set == nil {
				set = profileSet{}
			}
			set[p.Type] = p
		}
	}
	return set
}

// listProfiles is every stored profile, by model then type.
func (c *Coordinator) listProfiles() []api.Profile {
	c.profMu.Lock()
	out := make([]api.Profile, 0, len(c.profiles))
	for _, p := range c.profiles {
		out = append(out, profileStatus(p))
	}
	c.profMu.Unlock()
	sortProfiles(out)
	return out
}

func sortProfiles(ps []api.Profile) {
	slices.SortFunc(ps, func(a, b api.Profile) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Type, b.Type))
	})
}

func profileStatus(p store.Profile) api.Profile {
	return api.Profile{Model: p.Model, Type: p.Type, Layers: len(p.Layers), ProfileBatch: p.ProfileBatch,
		Fingerprint: p.Fingerprint, StoredAt: p.StoredAt}
}

// parseProfiles checks a PUT /v1/profiles/{model} body and splits it into
// one record per measured type; estimated lists the types its header marks
// as roofline estimates, which are not stored.
func parseProfiles(model string, src []byte, now time.Time) (recs []store.Profile, estimated []string, err error) {
	if !identifierName.MatchString(model) {
		return nil, nil, badRequest("model %q is not a model name (letters, digits, '.', '_' and '-')", model)
	}
	label := "profile of model " + model
	pf, err := config.ParseProblem(label, src)
	if err != nil {
		return nil, nil, badRequest("%v", err)
	}
	estimated = config.EstimatedTypes(src)
	var types []string
	for _, t := range pf.Types {
		if !slices.Contains(estimated, t.Name) {
			types = append(types, t.Name)
		}
	}
	if len(types) == 0 {
		return nil, estimated, badRequest("%s: every type (%s) is marked estimated in its header: nothing measured to store", label, strings.Join(estimated, ", "))
	}
	m, err := zooModel(model)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the zoo's model: %w", label, err)
	}
	fingerprint := ""
	if m != nil {
		if err := checkProfileLayers(label, m, types, pf); err != nil {
			return nil, nil, err
		}
		fingerprint = shapesFingerprint(m.Shapes())
	}
	for col, t := range pf.Types {
		if !slices.Contains(types, t.Name) {
			continue
		}
		r := store.Profile{Model: model, Type: t.Name, ProfileBatch: pf.ProfileBatch, Fingerprint: fingerprint, StoredAt: now,
			DenseSync: t.DenseSync}
		for _, l := range pf.Layers {
			r.Layers = append(r.Layers, store.ProfileLayer{Name: l.Name, OCT: l.OCT[col], ODT: l.ODT[col], Alpha: l.Alpha[col], Beta: l.Beta[col]})
		}
		recs = append(recs, r)
	}
	return recs, estimated, nil
}

// checkProfileLayers checks a profile of a zoo model against the model's
// layers: their count and names, and that the model is planned per layer.
func checkProfileLayers(label string, m *config.Model, types []string, pf *config.Problem) error {
	shapes := m.Shapes()
	at := fmt.Sprintf("%s, type %s", label, strings.Join(types, ", "))
	if m.HasTowers() {
		return badRequest("%s: model %s has towers and is planned as one merged layer: a per-layer profile does not apply", at, m.Name)
	}
	if len(pf.Layers) != len(shapes) {
		return badRequest("%s: layer: %d layers, model %s has %d (profile this model: heterps profile --model %s)",
			at, len(pf.Layers), m.Name, len(shapes), m.Name)
	}
	for i, s := range shapes {
		if pf.Layers[i].Name != s.Name {
			return badRequest("%s: layer[%d].name: %q, model %s's layer %d is %q", at, i, pf.Layers[i].Name, m.Name, i, s.Name)
		}
	}
	return nil
}

// putProfiles stores a profile body's measured types for model, each
// replacing the stored one of its (model, type), and answers once they
// are on disk.
func (c *Coordinator) putProfiles(model string, src []byte) (api.ProfilePutResponse, error) {
	recs, estimated, err := parseProfiles(model, src, time.Now().UTC())
	if err != nil {
		return api.ProfilePutResponse{}, err
	}
	c.profWrite.Lock() // one PUT at a time: the disk and memory see them in the same order
	defer c.profWrite.Unlock()
	c.profMu.Lock()
	added := 0
	for _, r := range recs {
		if _, ok := c.profiles[store.ProfileKey(r.Model, r.Type)]; !ok {
			added++
		}
	}
	held := len(c.profiles)
	c.profMu.Unlock()
	if held+added > MaxStoredProfiles {
		return api.ProfilePutResponse{}, httpErrorf(http.StatusConflict,
			"the coordinator holds %d profiles, at most %d: forget some first (DELETE /v1/profiles/{model})", held, MaxStoredProfiles)
	}
	if c.store != nil {
		var done []<-chan error
		for _, r := range recs {
			done = append(done, c.store.PutProfile(r))
		}
		for _, d := range done {
			if err := <-d; err != nil {
				return api.ProfilePutResponse{}, httpErrorf(http.StatusServiceUnavailable, "recording the profile: %v", err)
			}
		}
	}
	resp := api.ProfilePutResponse{Model: model, Estimated: estimated, Stored: []api.Profile{}}
	c.profMu.Lock()
	for _, r := range recs {
		c.profiles[store.ProfileKey(r.Model, r.Type)] = r
		resp.Stored = append(resp.Stored, profileStatus(r))
		if _, ok := c.cfg.Catalog.Type(r.Type); !ok {
			resp.NotInCatalog = append(resp.NotInCatalog, r.Type)
		}
	}
	c.profMu.Unlock()
	types := make([]string, len(recs))
	for i, r := range recs {
		types[i] = r.Type
	}
	c.log.Info("profile stored", "model", model, "types", types, "layers", len(recs[0].Layers), "profile_batch", recs[0].ProfileBatch)
	return resp, nil
}

// deleteProfiles forgets model's stored profiles (of type typ only, if
// set) and returns them; none is a 404.
func (c *Coordinator) deleteProfiles(model, typ string) ([]api.Profile, error) {
	c.profWrite.Lock()
	defer c.profWrite.Unlock()
	c.profMu.Lock()
	var gone []store.Profile
	for _, p := range c.profiles {
		if p.Model == model && (typ == "" || p.Type == typ) {
			gone = append(gone, p)
		}
	}
	c.profMu.Unlock()
	if len(gone) == 0 {
		if typ != "" {
			return nil, httpErrorf(http.StatusNotFound, "no stored profile of model %q on type %q", model, typ)
		}
		return nil, httpErrorf(http.StatusNotFound, "no stored profile of model %q", model)
	}
	if c.store != nil {
		var done []<-chan error
		for _, p := range gone {
			done = append(done, c.store.DeleteProfile(p.Model, p.Type))
		}
		for _, d := range done {
			if err := <-d; err != nil {
				return nil, httpErrorf(http.StatusServiceUnavailable, "forgetting the profile: %v", err)
			}
		}
	}
	out := make([]api.Profile, 0, len(gone))
	c.profMu.Lock()
	for _, p := range gone {
		delete(c.profiles, store.ProfileKey(p.Model, p.Type))
		out = append(out, profileStatus(p))
	}
	c.profMu.Unlock()
	sortProfiles(out)
	return out, nil
}

// applyStored replaces, in pc (the problem of model m, B_o already set),
// the layer columns of every type that has a usable stored profile by the
// profile's, rescaled from its B_o to pc's (oct and odt are times at B_o,
// and the cost model is linear in B/B_o, so the rescaling is exact), and
// returns the types it replaced and why it passed over the others' stored
// profiles.
func applyStored(pc *config.Problem, m *config.Model, set profileSet) (measured, skipped []string) {
	if len(set) == 0 {
		return nil, nil
	}
	fingerprint := ""
	for t, typ := range pc.Types {
		r, ok := set[typ.Name]
		if !ok {
			continue
		}
		switch {
		case len(r.Layers) != len(pc.Layers):
			skipped = append(skipped, fmt.Sprintf("the stored profile of model %s on type %s has %d layers, the job plans %d",
				r.Model, r.Type, len(r.Layers), len(pc.Layers)))
			continue
		case r.Fingerprint != "":
			if fingerprint == "" {
				fingerprint = shapesFingerprint(m.Shapes())
			}
			if r.Fingerprint != fingerprint {
				skipped = append(skipped, fmt.Sprintf("the stored profile of model %s on type %s was measured on other layer shapes (%s, the job's model has %s)",
					r.Model, r.Type, r.Fingerprint, fingerprint))
				continue
			}
		}
		scale := float64(pc.ProfileBatch) / float64(r.ProfileBatch)
		for l := range pc.Layers {
			ml, pl := r.Layers[l], &pc.Layers[l]
			pl.OCT[t], pl.ODT[t] = ml.OCT*scale, ml.ODT*scale
			pl.Alpha[t], pl.Beta[t] = ml.Alpha, ml.Beta
		}
		pc.Types[t].DenseSync = r.DenseSync
		measured = append(measured, typ.Name)
	}
	return measured, skipped
}

// problemSources is where each type's layer times in a job's problem came
// from (sched.Plan.Sources), which dense_sync the measured ones include
// (sched.Plan.DenseSync), and notes on stored profiles not used.
type problemSources struct {
	types     map[string]string
	denseSync map[string]string
	skipped   []string
}

// sourcesOf maps every type of pc to estimated, except those in measured.
func sourcesOf(pc *config.Problem, measured []string) map[string]string {
	out := make(map[string]string, len(pc.Types))
	for _, t := range pc.Types {
		out[t.Name] = sched.SourceEstimated
		if slices.Contains(measured, t.Name) {
			out[t.Name] = sched.SourceMeasured
		}
	}
	return out
}

func (c *Coordinator) handlePutProfile(w http.ResponseWriter, r *http.Request) {
	src, ok := readTOMLBody(w, r)
	if !ok {
		return
	}
	resp, err := c.putProfiles(r.PathValue("model"), src)
	reply(w, http.StatusOK, resp, err)
}

func (c *Coordinator) handleProfiles(w http.ResponseWriter, _ *http.Request) {
	reply(w, http.StatusOK, c.listProfiles(), nil)
}

func (c *Coordinator) handleDeleteProfiles(w http.ResponseWriter, r *http.Request) {
	gone, err := c.deleteProfiles(r.PathValue("model"), r.PathValue("type"))
	reply(w, http.StatusOK, gone, err)
}
