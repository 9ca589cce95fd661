package place

import "fmt"

// NMTConfig shapes the NMT-like graph.
type NMTConfig struct {
	Batch, Hidden, Vocab int
	Layers               int // LSTM layers of the encoder and of the decoder
	Steps                int // time steps of the source and of the target
	Chunk                int // time steps per co-location group
}

// DefaultNMT is the paper's NMT shape, shortened: 2+2 LSTM layers of 1024
// units, 10 source and 10 target steps, a 40,000-word vocabulary, batch
// 128; about 290 ops in 38 co-location groups.
var DefaultNMT = NMTConfig{Batch: 128, Hidden: 1024, Vocab: 40000, Layers: 2, Steps: 10, Chunk: 2}

// nmt builds the graph; groups are kept by name.
type nmt struct {
	*builder
	c       NMTConfig
	groups  map[string]int
	gathers map[string]int // embedding lookups by name
}

func (n *nmt) grp(format string, args ...any) int {
	name := fmt.Sprintf(format, args...)
	if g, ok := n.groups[name]; ok {
		return g
	}
	n.groups[name] = n.group(name)
	return n.groups[name]
}

// cells are one LSTM stack's ops per [layer][step].
type cells struct {
	matmul, lstm   [][]int
	grad, dx, dw   [][]int
	weights, state int64
}

func newCells(L, T int) *cells {
	mk := func() [][]int {
		m := make([][]int, L)
		for l := range m {
			m[l] = make([]int, T)
		}
		return m
	}
	return &cells{matmul: mk(), lstm: mk(), grad: mk(), dx: mk(), dw: mk()}
}

// NMTGraph builds the step graph of an attentional seq2seq LSTM model
// (encoder, decoder, dot-product attention, softmax output per target step)
// with the backward and Adam updates; a layer's weights and their update
// are a co-location group of their own. Weight gradients of a layer are
// accumulated over its time steps (a chain of GEMMs), as frameworks do.
func NMTGraph(c NMTConfig) (*Graph, error) {
	if c.Batch <= 0 || c.Hidden <= 0 || c.Vocab <= 0 || c.Layers <= 0 || c.Steps <= 0 || c.Chunk <= 0 ||
		c.Batch > 1<<16 || c.Hidden > 1<<16 || c.Vocab > 1<<24 || c.Layers > 64 || c.Steps > 1024 {
		return nil, fmt.Errorf("place: nmt graph: sizes out of range: %+v", c)
	}
	n := &nmt{builder: &builder{g: &Graph{Name: "nmt-like"}, batch: c.Batch}, c: c, groups: map[string]int{}}
	B, H, T, L := c.Batch, c.Hidden, c.Steps, c.Layers
	input := n.add(Op{Name: "input", Kind: KindInput, Group: n.grp("emb_enc"), Out: int64(8 * B * T), Dims: [3]int{B, 2 * T}})
	embEnc := n.embedding("emb_enc", input)
	embDec := n.embedding("emb_dec", input)
	n.gathers = map[string]int{"emb_enc": embEnc, "emb_dec": embDec}
	enc, dec := newCells(L, T), newCells(L, T)
	n.stackForward("enc", enc, embEnc, nil)
	n.stackForward("dec", dec, embDec, enc)
	keysG := n.grp("attn/keys")
	keys := make([]int, T)
	for t := range T {
		keys[t] = enc.lstm[L-1][t]
	}
	stack := n.add(elementwise("attn/keys", KindConcat, keysG, B*T, H, 0), keys...)
	scores, ctx, logits, loss := make([]int, T), make([]int, T), make([]int, T), make([]int, T)
	V := c.Vocab
	for t := range T {
		ag, og := n.grp("attn/t%d", t/c.Chunk), n.grp("softmax/t%d", t/c.Chunk)
		top := dec.lstm[L-1][t]
		scores[t] = n.add(n.mm(fmt.Sprintf("attn/scores%d", t), ag, B, T, H), top, stack)
		ctx[t] = n.add(n.mm(fmt.Sprintf("attn/ctx%d", t), ag, B, H, T), scores[t], stack)
		logits[t] = n.add(n.mm(fmt.Sprintf("softmax/logits%d", t), og, B, V, 2*H), ctx[t], top)
		loss[t] = n.add(elementwise(fmt.Sprintf("softmax/loss%d", t), KindLoss, og, B, V, 8), logits[t])
	}
	// Backward, the target steps last to first.
	dTop := make([]int, T) // ops carrying the gradient of the decoder's top output at t
	attnGrad := make([]int, T)
	var dwOut int
	var logitsDx []int
	for t := T - 1; t >= 0; t-- {
		ag, og := n.grp("attn/t%d", t/c.Chunk), n.grp("softmax/t%d", t/c.Chunk)
		dx := n.add(n.mm(fmt.Sprintf("softmax/logits_dx%d", t), og, B, 2*H, V), loss[t])
		logitsDx = append(logitsDx, dx)
		dw := n.mm(fmt.Sprintf("softmax/logits_dw%d", t), og, 2*H, V, B)
		if t == T-1 {
			dwOut = n.add(dw, loss[t], ctx[t])
		} else {
			dwOut = n.add(dw, loss[t], ctx[t], dwOut)
		}
		ga := n.mm(fmt.Sprintf("attn/grad%d", t), ag, B, H+T, 2*H)
		ga.Out = int64(4 * B * (T + 1) * H)
		attnGrad[t] = n.add(ga, dx, scores[t], stack)
		dTop[t] = dx
	}
	su := update("softmax/update", n.grp("softmax/update"), int64(2*H*V), 2)
	su.Mem += su.Out // the weights live here
	upd := n.add(su, dwOut)
	n.feeds(upd, logits...)
	n.feeds(upd, logitsDx...)
	stackGrad := n.add(elementwise("attn/keys_grad", KindConcat, keysG, B*T, H, 0), attnGrad...)
	n.stackBackward("dec", dec, func(t int) []int { return []int{dTop[t], attnGrad[t]} }, nil)
	n.stackBackward("enc", enc, func(int) []int { return []int{stackGrad} }, dec)
	n.embeddingBackward("emb_enc", enc)
	n.embeddingBackward("emb_dec", dec)
	return n.g, nil
}

func (n *nmt) mm(name string, g, m, k, kk int) Op { return matmul(name, g, m, k, kk) }

// embedding adds one side's lookup of the whole sequence.
func (n *nmt) embedding(name string, input int) int {
	B, H, T, V := n.c.Batch, n.c.Hidden, n.c.Steps, n.c.Vocab
	return n.add(Op{Name: name + "/gather", Kind: KindGather, Group: n.grp("%s", name), FLOPs: float64(B * T * H),
		Bytes: float64(8 * B * T * H), Out: int64(4 * B * T * H), Mem: int64(4 * V * H), Dims: [3]int{V, H, B * T}}, input)
}

func (n *nmt) embeddingBackward(name string, st *cells) {
	B, H, T := n.c.Batch, n.c.Hidden, n.c.Steps
	g := n.grp("%s", name)
	ins := make([]int, T)
	for t := range T {
		ins[t] = st.dx[0][t]
	}
	gg := n.add(Op{Name: name + "/gather_grad", Kind: KindGatherGrad, Group: g, FLOPs: float64(B * T * H),
		Bytes: float64(8 * B * T * H), Out: int64(4 * B * T * H), Dims: [3]int{n.c.Vocab, H, B * T}}, ins...)
	u := update(name+"/sparse_update", g, int64(B*T*H), 2)
	u.Kind, u.Mem, u.Dims = KindSparseUpdate, int64(8*n.c.Vocab*H), [3]int{B * T, H, 2}
	n.feeds(n.add(u, gg), n.gathers[name])
}

// stackForward adds the forward cells of one LSTM stack; a decoder (prev
// set) starts from the encoder's last states.
func (n *nmt) stackForward(side string, st *cells, emb int, prev *cells) {
	B, H, T := n.c.Batch, n.c.Hidden, n.c.Steps
	for t := range T {
		for l := range n.c.Layers {
			g := n.grp("%s%d/t%d", side, l, t/n.c.Chunk)
			below := emb
			if l > 0 {
				below = st.lstm[l-1][t]
			}
			ins := []int{below}
			switch {
			case t > 0:
				ins = append(ins, st.lstm[l][t-1])
			case prev != nil:
				ins = append(ins, prev.lstm[l][T-1])
			}
			st.matmul[l][t] = n.add(matmul(fmt.Sprintf("%s%d/matmul%d", side, l, t), g, B, 4*H, 2*H), ins...)
			cell := elementwise(fmt.Sprintf("%s%d/lstm%d", side, l, t), KindLSTM, g, B, H, 30)
			cell.Bytes, cell.Mem = float64(4*B*H*7), int64(4*B*H*6) // gates, c and h saved
			lstmIns := []int{st.matmul[l][t]}
			if t > 0 {
				lstmIns = append(lstmIns, st.lstm[l][t-1])
			} else if prev != nil {
				lstmIns = append(lstmIns, prev.lstm[l][T-1])
			}
			st.lstm[l][t] = n.add(cell, lstmIns...)
		}
	}
}

// stackBackward adds the backward cells, last step first; top gives the ops
// carrying the gradient of the top layer's output at step t; a stack that a
// decoder continued (next set) also gets the decoder's state gradients.
func (n *nmt) stackBackward(side string, st *cells, top func(t int) []int, next *cells) {
	B, H, T, L := n.c.Batch, n.c.Hidden, n.c.Steps, n.c.Layers
	for t := T - 1; t >= 0; t-- {
		for l := L - 1; l >= 0; l-- {
			g := n.grp("%s%d/t%d", side, l, t/n.c.Chunk)
			ins := []int{st.lstm[l][t]}
			if l == L-1 {
				ins = append(ins, top(t)...)
			} else {
				ins = append(ins, st.dx[l+1][t])
			}
			switch {
			case t < T-1:
				ins = append(ins, st.dx[l][t+1], st.grad[l][t+1])
			case next != nil:
				ins = append(ins, next.dx[l][0], next.grad[l][0])
			}
			gr := elementwise(fmt.Sprintf("%s%d/lstm_grad%d", side, l, t), KindLSTMGrad, g, B, 4*H, 10)
			gr.Bytes, gr.Dims = float64(4*B*H*12), [3]int{B, H}
			st.grad[l][t] = n.add(gr, ins...)
			st.dx[l][t] = n.add(matmul(fmt.Sprintf("%s%d/matmul_dx%d", side, l, t), g, B, 2*H, 4*H), st.grad[l][t])
			dwIns := []int{st.grad[l][t], st.matmul[l][t]}
			if t < T-1 {
				dwIns = append(dwIns, st.dw[l][t+1])
			}
			st.dw[l][t] = n.add(matmul(fmt.Sprintf("%s%d/matmul_dw%d", side, l, t), g, 2*H, 4*H, B), dwIns...)
		}
	}
	for l := range L {
		u := update(fmt.Sprintf("%s%d/update", side, l), n.grp("%s%d/update", side, l), int64(2*H*4*H+4*H), 2)
		u.Mem += u.Out // the weights live here
		upd := n.add(u, st.dw[l][0])
		n.feeds(upd, st.matmul[l]...)
		n.feeds(upd, st.dx[l]...)
	}
}

// InceptionConfig shapes the Inception-like graph.
type InceptionConfig struct {
	Batch, Side, Channels int // batch, feature-map side, channels between blocks
	Blocks                int
}

// DefaultInception is a stack of Inception-v3 "35x35" modules: batch 32,
// 256 channels, 6 blocks of four branches (1x1; 1x1 then 5x5; 1x1 then two
// 3x3; pool then 1x1), about 200 ops in 57 groups.
var DefaultInception = InceptionConfig{Batch: 32, Side: 35, Channels: 256, Blocks: 6}

// conv is one convolution layer of a branch: output channels and kernel side.
type conv struct{ out, k int }

// InceptionGraph builds the step graph of an Inception-like branchy
// network with its backward and updates; each branch of each block, the
// stem, the head and each layer's weights with their update are
// co-location groups.
func InceptionGraph(c InceptionConfig) (*Graph, error) {
	if c.Batch <= 0 || c.Side <= 0 || c.Channels < 4 || c.Blocks <= 0 ||
		c.Batch > 1<<12 || c.Side > 1<<10 || c.Channels > 1<<14 || c.Blocks > 64 {
		return nil, fmt.Errorf("place: inception graph: sizes out of range: %+v", c)
	}
	b := &builder{g: &Graph{Name: "inception-like"}, batch: c.Batch}
	rows := c.Batch * c.Side * c.Side
	C := c.Channels
	stemG := b.group("stem")
	input := b.add(Op{Name: "input", Kind: KindInput, Group: stemG, Out: int64(4 * rows * 3), Dims: [3]int{rows, 3}})
	type layer struct{ fwd, in, group, inC, outC, k int }
	var layers []layer // every conv, for the backward
	addConv := func(name string, g, in, inC int, cv conv) int {
		op := matmul(name, g, rows, cv.out, inC*cv.k*cv.k)
		op.Mem = op.Out                    // saved for the backward
		op.FLOPs += float64(rows * cv.out) // bias and ReLU, fused
		id := b.add(op, in)
		layers = append(layers, layer{id, in, g, inC, cv.out, cv.k})
		return id
	}
	x := addConv("stem/conv", stemG, input, 3, conv{C, 3})
	branches := [][]conv{{{C / 4, 1}}, {{3 * C / 16, 1}, {C / 4, 5}}, {{C / 4, 1}, {3 * C / 8, 3}, {3 * C / 8, 3}}, {{C / 8, 1}}}
	outC := 0
	for _, br := range branches {
		outC += br[len(br)-1].out
	}
	type block struct{ concat, pool, in int }
	blocks := make([]block, c.Blocks)
	for k := range c.Blocks {
		var outs []int
		for j, br := range branches {
			g := b.group(fmt.Sprintf("block%d/branch%d", k, j))
			cur, inC := x, C
			if j == 3 {
				pool := elementwise(fmt.Sprintf("block%d/pool", k), KindAct, g, rows, C, 9)
				cur = b.add(pool, x)
				blocks[k].pool = cur
			}
			for i, cv := range br {
				cur = addConv(fmt.Sprintf("block%d/branch%d/conv%d", k, j, i), g, cur, inC, cv)
				inC = cv.out
			}
			outs = append(outs, cur)
		}
		cat := elementwise(fmt.Sprintf("block%d/concat", k), KindConcat, b.group(fmt.Sprintf("block%d/concat", k)), rows, outC, 0)
		blocks[k].in, blocks[k].concat = x, b.add(cat, outs...)
		x, C = blocks[k].concat, outC
	}
	headG := b.group("head")
	head := b.add(matmul("head/fc", headG, c.Batch, 1000, C), x)
	grad := b.add(elementwise("head/loss", KindLoss, headG, c.Batch, 1000, 8), head)
	dhead := b.add(matmul("head/fc_dx", headG, c.Batch, C, 1000), grad)
	hu := b.add(variableUpdate(b, "head/update", int64(C*1000+1000)), b.add(matmul("head/fc_dw", headG, C, 1000, c.Batch), grad, x))
	b.feeds(hu, head, dhead)
	// Backward: every op's output gradient, by the op's index.
	dOut := map[int][]int{x: {dhead}}
	for k := c.Blocks - 1; k >= 0; k-- {
		split := b.add(elementwise(fmt.Sprintf("block%d/concat_grad", k), KindConcat, b.graphGroup(blocks[k].concat), rows, outC, 0), dOut[blocks[k].concat]...)
		for i := len(layers) - 1; i >= 0; i-- {
			ly := layers[i]
			if b.g.Ops[ly.fwd].Group == stemG || !inBlock(b.g, ly.group, k) {
				continue
			}
			if _, ok := dOut[ly.fwd]; !ok {
				dOut[ly.fwd] = []int{split}
			}
			b.convBackward(ly.fwd, ly.in, ly.group, rows, ly.inC, ly.outC, ly.k, dOut)
		}
		pool := blocks[k].pool
		pg := b.add(elementwise(fmt.Sprintf("block%d/pool_grad", k), KindActGrad, b.g.Ops[pool].Group, rows, C, 9), dOut[pool]...)
		dOut[blocks[k].in] = append(dOut[blocks[k].in], pg)
	}
	stem := layers[0]
	b.convBackward(stem.fwd, stem.in, stem.group, rows, stem.inC, stem.outC, stem.k, dOut)
	return b.g, nil
}

// variableUpdate is the Adam update of n weights in a group of its own,
// holding the weights.
func variableUpdate(b *builder, name string, n int64) Op {
	u := update(name, b.group(name), n, 2)
	u.Mem += u.Out
	return u
}

func (b *builder) graphGroup(op int) int { return b.g.Ops[op].Group }

func inBlock(g *Graph, group, k int) bool {
	var prefix = fmt.Sprintf("block%d/", k)
	return len(g.Groups[group]) > len(prefix) && g.Groups[group][:len(prefix)] == prefix
}

// convBackward adds a convolution's weight gradient, update and (unless
// its input is the graph's input) input gradient, which joins dOut[in].
func (b *builder) convBackward(fwd, in, g, rows, inC, outC, k int, dOut map[int][]int) {
	dy := dOut[fwd]
	name := b.g.Ops[fwd].Name
	dw := b.add(matmul(name+"_dw", g, inC*k*k, outC, rows), append([]int{in}, dy...)...)
	upd := b.add(variableUpdate(b, name+"/update", int64(inC*k*k*outC+outC)), dw)
	b.feeds(upd, fwd)
	if b.g.Ops[in].Kind == KindInput {
		return
	}
	dx := b.add(matmul(name+"_dx", g, rows, inC*k*k, outC), dy...)
	b.feeds(upd, dx)
	dOut[in] = append(dOut[in], dx)
}
