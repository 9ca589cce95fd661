package config

import (
	"fmt"
	"slices"
	"strings"
)

// Model is a model file: the input schema, a list of layers, the loss and
// the optimisers. Layers run in order; layers with a tower name form
// separate towers that a "cosine" or "dot" layer joins.
type Model struct {
	Version         int         `toml:"version"`
	Name            string      `toml:"name"`
	Task            string      `toml:"task"` // ctr | classify | match | nce | regress
	Input           ModelInput  `toml:"input"`
	Layers          []Layer     `toml:"layer"`
	Loss            Loss        `toml:"loss"`
	Optimizer       Optimizer   `toml:"optimizer"`
	SparseOptimizer *Optimizer  `toml:"sparse_optimizer"`
	Init            *InitConfig `toml:"init"`
}

// ModelInput describes what one sample carries.
type ModelInput struct {
	Dense   int   `toml:"dense"`   // dense features per sample
	Slots   int   `toml:"slots"`   // sparse slots per sample
	Vocab   int64 `toml:"vocab"`   // rows of each embedding table (hashed ids)
	Classes int   `toml:"classes"` // classes of a classifier, 0 otherwise
}

// Layer is one [[layer]] entry. Which fields apply depends on Kind.
type Layer struct {
	Name      string `toml:"name"`
	Kind      string `toml:"kind"`
	Tower     string `toml:"tower"`
	In        int    `toml:"in"`        // fc, nce: checked against the computed input width
	Out       int    `toml:"out"`       // fc
	Act       string `toml:"act"`       // fc: identity | relu | sigmoid | tanh
	Dim       int    `toml:"dim"`       // embedding
	Pool      string `toml:"pool"`      // embedding: sum | mean
	Slots     []int  `toml:"slots"`     // embedding: [first, end) slot range; all slots when empty
	Classes   int    `toml:"classes"`   // nce: output vocabulary
	Negatives int    `toml:"negatives"` // nce: sampled negatives per sample
}

// Loss selects the training objective.
type Loss struct {
	Kind   string  `toml:"kind"`   // bce | softmax | hinge | mse | nce
	Margin float64 `toml:"margin"` // hinge
}

// Optimizer holds optimiser hyper-parameters and the learning-rate schedule.
type Optimizer struct {
	Kind        string  `toml:"kind"` // sgd | adagrad | adam
	LR          float64 `toml:"lr"`
	Momentum    float64 `toml:"momentum"`
	Beta1       float64 `toml:"beta1"`
	Beta2       float64 `toml:"beta2"`
	Eps         float64 `toml:"eps"`
	WeightDecay float64 `toml:"weight_decay"`
	Schedule    string  `toml:"schedule"` // constant | warmup | cosine
	Warmup      int     `toml:"warmup_steps"`
	ClipNorm    float64 `toml:"clip_norm"` // global gradient norm cap; 0 = none
}

// InitConfig seeds and scales parameter initialisation.
type InitConfig struct {
	Seed           uint64  `toml:"seed"`
	EmbeddingScale float64 `toml:"embedding_scale"`
}

// LayerKinds are the layer kinds a model file may use.
var LayerKinds = []string{"embedding", "concat", "dense", "fc", "cosine", "dot", "nce"}

// LossKinds are the losses a model file may use.
var LossKinds = []string{"bce", "softmax", "hinge", "mse", "nce"}

var taskKinds = []string{"ctr", "classify", "match", "nce", "regress"}

// Bounds on a model's sizes. They keep every product of sizes (weights,
// bytes, bytes with optimiser state) far from overflowing int64 and refuse
// absurd numbers before anything is allocated from them; whether a model
// that passes fits a machine is nn's memory estimates' question.
const (
	// MaxVocab bounds input.vocab: 2^40 (1.1e12) rows, a hashed vocabulary
	// that parameter servers create lazily.
	MaxVocab = 1 << 40
	// MaxSlots bounds input.slots.
	MaxSlots = 1 << 16
	// MaxDim bounds input.dense, an embedding's dim, an fc's out,
	// input.classes and an nce's negatives.
	MaxDim = 1 << 20
	// MaxWidth bounds every layer's input and output width, in floats per
	// sample.
	MaxWidth = 1 << 24
	// MaxClasses bounds an nce layer's classes (rows of its table).
	MaxClasses = 1 << 32
)

// LayerShape is what the scheduler sees of a layer: its kind and sizes (in
// floats per sample for activations, floats in all for weights).
type LayerShape struct {
	Name    string
	Kind    string
	Tower   string
	In      int
	Weights int64
	Out     int
}

// ZooNames lists the models shipped in config/examples/models.
func ZooNames() []string { return ExampleNames(ExampleModels) }

// LoadModel loads a model by zoo name ("ctrdnn") or by file path (read as
// ReadFile does: a regular file of at most MaxFileBytes), decodes it
// strictly and validates it.
func LoadModel(nameOrPath string) (*Model, error) {
	name, src, err := readNamedOrFile(ExampleModels, nameOrPath)
	if err != nil {
		if IsExampleName(nameOrPath) {
			return nil, fmt.Errorf("model %q: not a file and not in the zoo (%s)", nameOrPath, strings.Join(ZooNames(), ", "))
		}
		return nil, fmt.Errorf("model %q: %w", nameOrPath, err)
	}
	return ParseModel(name, src)
}

// ParseModel decodes and validates a model file's contents.
func ParseModel(name string, src []byte) (*Model, error) {
	var m Model
	if err := Decode(name, src, &m); err != nil {
		return nil, err
	}
	loc := NewLocator(name, src)
	m.applyDefaults(loc)
	if err := m.validate(loc); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Model) applyDefaults(loc *Locator) {
	if m.Version == 0 {
		m.Version = 1
	}
	m.Optimizer.defaults(loc.keysOf("optimizer"))
	if m.SparseOptimizer != nil {
		m.SparseOptimizer.defaults(loc.keysOf("sparse_optimizer"))
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.Kind == "fc" && l.Act == "" {
			l.Act = "identity"
		}
		if l.Kind == "embedding" && l.Pool == "" {
			l.Pool = "sum"
		}
	}
}

// defaults fills the settings the file left out; given lists the keys it
// set (nil: none), so that lr = 0 is refused by validate and beta1 = 0 (no
// first moment) is kept, not both turned into the defaults.
func (o *Optimizer) defaults(given map[string]bool) {
	if o.Kind == "" {
		o.Kind = "adam"
	}
	if o.LR == 0 && !given["lr"] {
		o.LR = 0.001
	}
	if o.Beta1 == 0 && !given["beta1"] {
		o.Beta1 = 0.9
	}
	if o.Beta2 == 0 && !given["beta2"] {
		o.Beta2 = 0.999
	}
	if o.Eps == 0 && !given["eps"] {
		o.Eps = 1e-8
	}
	if o.Schedule == "" {
		o.Schedule = "constant"
	}
}

func (m *Model) validate(loc *Locator) error {
	if m.Version != 1 {
		return loc.Errorf("version", "unsupported version %d (this heterps reads version 1)", m.Version)
	}
	if m.Name == "" {
		return loc.Errorf("name", "missing")
	}
	if !slices.Contains(taskKinds, m.Task) {
		return loc.Errorf("task", "unknown task %q (want one of %s)", m.Task, strings.Join(taskKinds, ", "))
	}
	if err := m.Input.validate(loc); err != nil {
		return err
	}
	if len(m.Layers) == 0 {
		return loc.Errorf("layer", "a model needs at least one [[layer]]")
	}
	switch {
	case m.Loss.Kind == "":
		return loc.Errorf("loss.kind", "missing: a model needs [loss] kind = one of %s", strings.Join(LossKinds, ", "))
	case !slices.Contains(LossKinds, m.Loss.Kind):
		return loc.Errorf("loss.kind", "unknown loss %q (want one of %s)", m.Loss.Kind, strings.Join(LossKinds, ", "))
	}
	if err := m.Optimizer.validate(loc, "optimizer"); err != nil {
		return err
	}
	if m.SparseOptimizer != nil {
		if err := m.SparseOptimizer.validate(loc, "sparse_optimizer"); err != nil {
			return err
		}
	}
	_, err := m.shapes(loc)
	return err
}

func (in ModelInput) validate(loc *Locator) error {
	switch {
	case in.Dense < 0 || in.Dense > MaxDim:
		return loc.Errorf("input.dense", "must be in 0..%d, got %d", MaxDim, in.Dense)
	case in.Slots < 0 || in.Slots > MaxSlots:
		return loc.Errorf("input.slots", "must be in 0..%d, got %d", MaxSlots, in.Slots)
	case in.Slots > 0 && in.Vocab <= 0:
		return loc.Errorf("input.vocab", "must be > 0 when there are sparse slots, got %d", in.Vocab)
	case in.Vocab < 0 || in.Vocab > MaxVocab:
		return loc.Errorf("input.vocab", "must be in 0..%d (2^40), got %d", int64(MaxVocab), in.Vocab)
	case in.Classes < 0 || in.Classes > MaxDim:
		return loc.Errorf("input.classes", "must be in 0..%d, got %d", MaxDim, in.Classes)
	}
	return nil
}

func (o Optimizer) validate(loc *Locator, field string) error {
	switch {
	case !slices.Contains([]string{"sgd", "adagrad", "adam"}, o.Kind):
		return loc.Errorf(field+".kind", "unknown optimiser %q (want sgd, adagrad or adam)", o.Kind)
	case o.LR <= 0:
		return loc.Errorf(field+".lr", "must be > 0, got %g", o.LR)
	case o.Momentum < 0 || o.Momentum >= 1:
		return loc.Errorf(field+".momentum", "must be in [0, 1), got %g", o.Momentum)
	case o.Beta1 < 0 || o.Beta1 >= 1 || o.Beta2 < 0 || o.Beta2 >= 1:
		return loc.Errorf(field+".beta1", "betas must be in [0, 1), got %g and %g", o.Beta1, o.Beta2)
	case o.Eps <= 0:
		return loc.Errorf(field+".eps", "must be > 0, got %g", o.Eps)
	case o.WeightDecay < 0:
		return loc.Errorf(field+".weight_decay", "must be >= 0, got %g", o.WeightDecay)
	case !slices.Contains([]string{"constant", "warmup", "cosine"}, o.Schedule):
		return loc.Errorf(field+".schedule", "unknown schedule %q (want constant, warmup or cosine)", o.Schedule)
	case o.Warmup < 0:
		return loc.Errorf(field+".warmup_steps", "must be >= 0, got %d", o.Warmup)
	case o.ClipNorm < 0:
		return loc.Errorf(field+".clip_norm", "must be >= 0, got %g", o.ClipNorm)
	}
	return nil
}

// HasTowers reports whether m has towers joined by a cosine or dot layer:
// such a model runs only as a whole, in one pipeline stage.
func (m *Model) HasTowers() bool {
	return slices.ContainsFunc(m.Layers, func(l Layer) bool { return l.Tower != "" })
}

// Shapes returns each layer's kind and sizes, the features the scheduler
// uses. The model must have been validated (LoadModel/ParseModel do).
func (m *Model) Shapes() []LayerShape {
	s, _ := m.shapes(NewLocator(m.Name, nil))
	return s
}

// shapes infers every layer's input and output width, checking that layers
// fit together; errors point at the offending layer.
func (m *Model) shapes(loc *Locator) ([]LayerShape, error) {
	width := map[string]int{} // current activation width per tower ("" = main)
	var towers []string
	out := make([]LayerShape, len(m.Layers))
	for i, l := range m.Layers {
		at := fmt.Sprintf("layer[%d]", i)
		in := width[l.Tower]
		s := LayerShape{Name: l.Name, Kind: l.Kind, Tower: l.Tower, In: in}
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s%d", l.Kind, i)
		}
		if l.Tower != "" && !slices.Contains(towers, l.Tower) {
			towers = append(towers, l.Tower)
		}
		var err error
		switch l.Kind {
		case "embedding":
			err = m.embeddingShape(loc, at, l, &s)
		case "concat":
			s.Out = in + m.Input.Dense
			if m.Input.Dense == 0 {
				err = loc.Errorf(at+".kind", "concat needs dense input features (input.dense is 0)")
			}
		case "dense":
			s.Out = m.Input.Dense
			if m.Input.Dense == 0 {
				err = loc.Errorf(at+".kind", "dense input layer needs input.dense > 0")
			}
		case "fc":
			err = fcShape(loc, at, l, &s)
		case "cosine", "dot":
			err = joinShape(loc, at, l, towers, width, &s)
		case "nce":
			err = nceShape(loc, at, l, &s)
		default:
			err = loc.Errorf(at+".kind", "unknown layer kind %q (want one of %s)", l.Kind, strings.Join(LayerKinds, ", "))
		}
		if err == nil && s.Out > MaxWidth {
			err = loc.Errorf(at, "%s produces %d floats per sample, more than the cap of %d", l.Kind, s.Out, MaxWidth)
		}
		if err != nil {
			return nil, err
		}
		width[l.Tower] = s.Out
		out[i] = s
	}
	return out, nil
}

func (m *Model) embeddingShape(loc *Locator, at string, l Layer, s *LayerShape) error {
	if m.Input.Slots == 0 {
		return loc.Errorf(at+".kind", "embedding needs sparse slots (input.slots is 0)")
	}
	if l.Dim <= 0 || l.Dim > MaxDim {
		return loc.Errorf(at+".dim", "must be in 1..%d, got %d", MaxDim, l.Dim)
	}
	if l.Pool != "sum" && l.Pool != "mean" {
		return loc.Errorf(at+".pool", "unknown pooling %q (want sum or mean)", l.Pool)
	}
	first, end := 0, m.Input.Slots
	if len(l.Slots) != 0 {
		if len(l.Slots) != 2 {
			return loc.Errorf(at+".slots", "want [first, end), got %d values", len(l.Slots))
		}
		first, end = l.Slots[0], l.Slots[1]
		if first < 0 || end > m.Input.Slots || first >= end {
			return loc.Errorf(at+".slots", "range [%d, %d) is empty or outside the %d input slots", first, end, m.Input.Slots)
		}
	}
	s.Out = s.In + (end-first)*l.Dim
	s.Weights = m.Input.Vocab * int64(l.Dim)
	return nil
}

func fcShape(loc *Locator, at string, l Layer, s *LayerShape) error {
	if s.In == 0 {
		return loc.Errorf(at, "fc has no input: put an embedding, concat or dense layer before it")
	}
	if l.In != 0 && l.In != s.In {
		return loc.Errorf(at+".in", "says %d, but the layer before produces %d", l.In, s.In)
	}
	if l.Out <= 0 || l.Out > MaxDim {
		return loc.Errorf(at+".out", "must be in 1..%d, got %d", MaxDim, l.Out)
	}
	if !slices.Contains([]string{"identity", "relu", "sigmoid", "tanh"}, l.Act) {
		return loc.Errorf(at+".act", "unknown activation %q (want identity, relu, sigmoid or tanh)", l.Act)
	}
	s.Out = l.Out
	s.Weights = int64(s.In)*int64(l.Out) + int64(l.Out)
	return nil
}

// joinShape checks a cosine/dot layer: it joins exactly two towers of equal
// width. Its output is two similarities per sample: query i against its own
// document i (the positive pair) and against document (i+1) mod rows of the
// same batch (an in-batch negative), the input of the pairwise hinge loss.
func joinShape(loc *Locator, at string, l Layer, towers []string, width map[string]int, s *LayerShape) error {
	if l.Tower != "" {
		return loc.Errorf(at+".tower", "%s joins the towers and belongs to none", l.Kind)
	}
	if len(towers) != 2 {
		return loc.Errorf(at+".kind", "%s needs exactly two towers before it, found %d", l.Kind, len(towers))
	}
	a, b := width[towers[0]], width[towers[1]]
	if a == 0 || a != b {
		return loc.Errorf(at+".kind", "towers %q and %q end with widths %d and %d; they must be equal and > 0", towers[0], towers[1], a, b)
	}
	s.In = a
	s.Out = 2
	return nil
}

func nceShape(loc *Locator, at string, l Layer, s *LayerShape) error {
	if s.In == 0 {
		return loc.Errorf(at, "nce has no input")
	}
	if l.In != 0 && l.In != s.In {
		return loc.Errorf(at+".in", "says %d, but the layer before produces %d", l.In, s.In)
	}
	if l.Classes <= 1 || l.Classes > MaxClasses {
		return loc.Errorf(at+".classes", "must be in 2..%d, got %d", int64(MaxClasses), l.Classes)
	}
	if l.Negatives <= 0 || l.Negatives >= l.Classes || l.Negatives > MaxDim {
		return loc.Errorf(at+".negatives", "must be in [1, classes) and at most %d, got %d", MaxDim, l.Negatives)
	}
	s.Out = 1 + l.Negatives
	s.Weights = int64(l.Classes) * int64(s.In+1)
	return nil
}
