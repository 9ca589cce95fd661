package ps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/daemon/wire"
)

// The service's wire conventions, beyond those of daemon/wire's message
// types:
//
//   - A request for shard i of a job travels on stream ShardStream(i) and is
//     answered on the same stream; requests of one stream are served in
//     order, one at a time, so a client keeps at most one request per shard
//     and connection in flight (Client does).
//   - Meta.Job is JobKey(job), Meta.Key is ParamKey(table or block name).
//   - MsgPull: with T0 int64 [n] it pulls rows of table Key; with no
//     tensors it pulls dense block Key: its values, or with Micro k+1 its
//     optimiser's state buffer k (Shard.PullBlockStateInto; Micro is 0 for
//     rows). Meta.Step is the version to wait for ("after"). MsgPullReply
//     echoes the request's Meta with Step set to the version read and
//     carries T0 float32 [n, dim] (rows) or [len] (block).
//   - MsgPushSparse and MsgPushDense: (Stage, Replica, Step) with the
//     shard's job form the PushID; Batch is the weight b_k (> 0).
//     MsgAck echoes the push's Meta with Micro set to the version after the
//     call and Text "applied", "duplicate" or "pending" (BSP: accepted,
//     waiting for the other replicas).
//   - MsgSetMembers: Stage is the stage, Step the first step of the
//     change, T0 int64 [n] the member replica ids (Shard.SetMembers); Key
//     is 0. MsgAck echoes it with Text "applied".
//   - MsgAssignBlock: (Stage, Replica, Step) as for a push, Batch 1, Micro
//     the part (Shard.AssignBlock), T0 float32 [len] its values. MsgAck as
//     for a push.
//   - MsgReady: Key is 0, no tensors. MsgAck echoes it with Text "ready":
//     the shard is up (a host that routes connections to jobs answers
//     once the job's shards are built, a restored checkpoint loaded).
//   - MsgError echoes the request's Meta; Text says why. A request is
//     checked before the shard sees it; an error never closes the
//     connection.

// MsgSetMembers is the wire message type of a membership change
// (Shard.SetMembers), after daemon/wire's own types.
const MsgSetMembers = wire.MsgError + 1

// MsgAssignBlock is the wire message type of a part of a block's
// assignment (Shard.AssignBlock).
const MsgAssignBlock = MsgSetMembers + 1

// MsgReady is the wire message type of a request asking whether a shard
// is up (Client.AwaitReady).
const MsgReady = MsgAssignBlock + 1

// ShardStream is the stream requests for shard index i travel on.
func ShardStream(i int) uint32 { return uint32(i) + 1 }

// JobKey is the Meta.Job of a job's messages.
func JobKey(job string) uint64 { return initrow.NameHash(job) }

// ParamKey is the Meta.Key of a table's or block's messages.
func ParamKey(name string) uint64 { return initrow.NameHash(name) }

// Ack texts.
const (
	ackApplied   = "applied"
	ackDuplicate = "duplicate"
	ackPending   = "pending"
)

// DefaultMaxIDs caps the row ids of one pull or push.
const DefaultMaxIDs = 1 << 22

// ServiceOptions configure a Service.
type ServiceOptions struct {
	MaxIDs int          // row ids per request; 0 = DefaultMaxIDs
	Logger *slog.Logger // default slog.Default()
}

// Service serves the pulls and pushes of one or more shards over wire
// connections.
type Service struct {
	opts   ServiceOptions
	shards map[shardAddr]*Shard
	params map[shardAddr]map[uint64]string // ParamKey -> name, per shard
	index  []int                           // distinct shard indices served, for streams
}

type shardAddr struct {
	job   uint64
	index int
}

// NewService serves shards; no two may be the same shard of the same job,
// and no two names of a shard may share a ParamKey.
func NewService(opts ServiceOptions, shards ...*Shard) (*Service, error) {
	if opts.MaxIDs <= 0 {
		opts.MaxIDs = DefaultMaxIDs
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Service{opts: opts, shards: map[shardAddr]*Shard{}, params: map[shardAddr]map[uint64]string{}}
	seen := map[int]bool{}
	for _, sh := range shards {
		a := shardAddr{JobKey(sh.cfg.Job), sh.cfg.Shard}
		if _, dup := s.shards[a]; dup {
			return nil, fmt.Errorf("ps service: shard %d of job %q given twice: %w", a.index, sh.cfg.Job, ErrArg)
		}
		keys := map[uint64]string{}
		for _, name := range append(namesOf(sh.tables), namesOf(sh.blocks)...) {
			if prev, clash := keys[ParamKey(name)]; clash {
				return nil, fmt.Errorf("ps service: %q and %q share a key: %w", prev, name, ErrArg)
			}
			keys[ParamKey(name)] = name
		}
		s.shards[a], s.params[a] = sh, keys
		if !seen[a.index] {
			seen[a.index] = true
			s.index = append(s.index, a.index)
		}
	}
	return s, nil
}

func namesOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Serve accepts connections from ln and serves each until it closes or ctx
// ends; it returns when ctx ends (or ln closes), after every connection's
// handlers have stopped.
func (s *Service) Serve(ctx context.Context, ln *wire.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ps service: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServeConn(ctx, c)
		}()
	}
}

// ServeConn serves one connection, a goroutine per shard stream, until the
// connection closes or ctx ends; it then closes the connection.
func (s *Service) ServeConn(ctx context.Context, c *wire.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, i := range s.index {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // one stream failing ends the connection's service
			s.serveStream(ctx, c, i)
		}()
	}
	select {
	case <-ctx.Done():
	case <-c.Done():
	}
	c.Close()
	wg.Wait()
}

func (s *Service) serveStream(ctx context.Context, c *wire.Conn, index int) {
	stream := ShardStream(index)
	for {
		req, err := c.RecvShared(ctx, stream) // released once handled
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, wire.ErrClosed) {
				s.opts.Logger.Warn("ps service: receive", "peer", c.Peer(), "stream", stream, "err", err)
			}
			return
		}
		reply, sent := s.handle(ctx, index, req)
		req.Release()
		err = c.Send(ctx, stream, reply)
		if sent != nil {
			sent()
		}
		if err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("ps service: reply", "peer", c.Peer(), "stream", stream, "err", err)
			}
			return
		}
	}
}

// handle answers one request; every failure becomes a MsgError. sent, when
// not nil, is to be called once the reply is written: it recycles what the
// reply's tensors view.
func (s *Service) handle(ctx context.Context, index int, req *wire.MessageView) (reply *wire.Message, sent func()) {
	reply, sent, err := s.dispatch(ctx, index, req)
	if err != nil {
		text := err.Error()
		if len(text) > wire.MaxText {
			text = text[:wire.MaxText]
		}
		return &wire.Message{Type: wire.MsgError, Meta: req.Meta, Text: text}, nil
	}
	return reply, sent
}

func (s *Service) dispatch(ctx context.Context, index int, req *wire.MessageView) (*wire.Message, func(), error) {
	a := shardAddr{req.Meta.Job, index}
	sh, ok := s.shards[a]
	if !ok {
		return nil, nil, fmt.Errorf("ps service: no shard %d of job key %#x here: %w", index, req.Meta.Job, ErrUnknown)
	}
	switch req.Type {
	case MsgSetMembers:
		reply, err := s.setMembers(sh, req)
		return reply, nil, err
	case MsgReady:
		return &wire.Message{Type: wire.MsgAck, Meta: req.Meta, Text: "ready"}, nil, nil
	}
	name, ok := s.params[a][req.Meta.Key]
	if !ok {
		return nil, nil, fmt.Errorf("ps shard %d: no table or block with key %#x: %w", index, req.Meta.Key, ErrUnknown)
	}
	var reply *wire.Message
	var err error
	switch req.Type {
	case wire.MsgPull:
		return s.pull(ctx, sh, name, req)
	case wire.MsgPushSparse:
		reply, err = s.pushSparse(sh, name, req)
	case wire.MsgPushDense:
		reply, err = s.pushDense(sh, name, req)
	case MsgAssignBlock:
		reply, err = s.assignBlock(sh, name, req)
	default:
		err = fmt.Errorf("ps shard %d: %v is not a request: %w", index, req.Type, ErrArg)
	}
	return reply, nil, err
}

func (s *Service) pull(ctx context.Context, sh *Shard, name string, req *wire.MessageView) (*wire.Message, func(), error) {
	after, err := toInt64("after", req.Meta.Step)
	if err != nil {
		return nil, nil, err
	}
	reply := &wire.Message{Type: wire.MsgPullReply, Meta: req.Meta}
	if len(req.Tensors) == 0 {
		b, isBlock := sh.blocks[name]
		if !isBlock {
			return nil, nil, fmt.Errorf("pull of %q without ids: it is a table: %w", name, ErrArg)
		}
		part, err := blockPart(req.Meta.Micro)
		if err != nil {
			return nil, nil, err
		}
		buf := b.replyBuffer()
		version, err := sh.pullBlockPart(ctx, b, after, part, *buf)
		if err != nil {
			b.replies.Put(buf)
			return nil, nil, err
		}
		reply.Meta.Step = uint64(version)
		reply.Tensors = []wire.Tensor{wire.F32Tensor(*buf, len(*buf))}
		return reply, func() { b.replies.Put(buf) }, nil
	}
	t, isTable := sh.tables[name]
	if !isTable {
		return nil, nil, fmt.Errorf("pull of %q with ids: it is a block: %w", name, ErrArg)
	}
	if req.Meta.Micro != 0 {
		return nil, nil, fmt.Errorf("pull of rows of %q: part %d, but a table's rows have no parts: %w", name, req.Meta.Micro, ErrArg)
	}
	ids, err := s.idsInFrame(req, 1)
	if err != nil {
		return nil, nil, err
	}
	buf := t.replyBuffer(len(ids) * t.spec.Dim)
	version, err := sh.pullRows(ctx, t, ids, after, *buf, nil)
	if err != nil {
		t.replies.Put(buf)
		return nil, nil, err
	}
	reply.Meta.Step = uint64(version)
	reply.Tensors = []wire.Tensor{wire.F32Tensor(*buf, len(ids), t.spec.Dim)}
	return reply, func() { t.replies.Put(buf) }, nil
}

func (s *Service) pushSparse(sh *Shard, name string, req *wire.MessageView) (*wire.Message, error) {
	t, ok := sh.tables[name]
	if !ok {
		return nil, fmt.Errorf("sparse push to %q, not a table: %w", name, ErrArg)
	}
	if err := req.Want(wire.Int64, wire.Float32); err != nil {
		return nil, fmt.Errorf("sparse push to %q: %w: %w", name, err, ErrArg)
	}
	ids, err := s.ids(req, 2)
	if err != nil {
		return nil, err
	}
	g := &req.Tensors[1]
	if len(g.Shape) != 2 || g.Shape[0] != len(ids) || g.Shape[1] != t.spec.Dim {
		return nil, fmt.Errorf("sparse push to %q: gradient shape %v, want [%d %d]: %w", name, g.Shape, len(ids), t.spec.Dim, ErrArg)
	}
	grad, err := gradient(g)
	if err != nil {
		return nil, err
	}
	id, weight, err := pushIdentity(sh, req)
	if err != nil {
		return nil, err
	}
	ack, err := sh.PushRows(id, name, weight, ids, grad)
	if err != nil {
		return nil, err
	}
	return ackMessage(req, ack), nil
}

func (s *Service) pushDense(sh *Shard, name string, req *wire.MessageView) (*wire.Message, error) {
	grad, id, weight, err := blockRequest(sh, name, req, "dense push to", "gradient floats")
	if err != nil {
		return nil, err
	}
	ack, err := sh.PushBlock(id, name, weight, grad)
	if err != nil {
		return nil, err
	}
	return ackMessage(req, ack), nil
}

func (s *Service) assignBlock(sh *Shard, name string, req *wire.MessageView) (*wire.Message, error) {
	part, err := blockPart(req.Meta.Micro)
	if err != nil {
		return nil, err
	}
	v, id, _, err := blockRequest(sh, name, req, "assignment of", "floats")
	if err != nil {
		return nil, err
	}
	ack, err := sh.AssignBlock(id, name, part, v)
	if err != nil {
		return nil, err
	}
	return ackMessage(req, ack), nil
}

// blockRequest checks a request that carries a whole block of floats (a
// dense push's gradient, an assignment's part) and returns the floats, in
// place in the frame where it can (gradient), and the push's identity and
// weight. what and floats name the request and its floats in errors.
func blockRequest(sh *Shard, name string, req *wire.MessageView, what, floats string) ([]float32, PushID, float64, error) {
	b, ok := sh.blocks[name]
	if !ok {
		return nil, PushID{}, 0, fmt.Errorf("%s %q, not a block: %w", what, name, ErrArg)
	}
	if err := req.Want(wire.Float32); err != nil {
		return nil, PushID{}, 0, fmt.Errorf("%s %q: %w: %w", what, name, err, ErrArg)
	}
	t := &req.Tensors[0]
	if t.Len() != len(b.spec.Init) {
		return nil, PushID{}, 0, fmt.Errorf("%s %q: %d %s for a block of %d: %w", what, name, t.Len(), floats, len(b.spec.Init), ErrArg)
	}
	v, err := gradient(t)
	if err != nil {
		return nil, PushID{}, 0, err
	}
	id, weight, err := pushIdentity(sh, req)
	return v, id, weight, err
}

func (s *Service) setMembers(sh *Shard, req *wire.MessageView) (*wire.Message, error) {
	if req.Meta.Stage > math.MaxInt32 {
		return nil, fmt.Errorf("set members: stage %d out of range: %w", req.Meta.Stage, ErrArg)
	}
	from, err := toInt64("step", req.Meta.Step)
	if err != nil {
		return nil, err
	}
	ids, err := s.ids(req, 1)
	if err != nil {
		return nil, err
	}
	replicas := make([]int, len(ids))
	for i, r := range ids {
		if r < 0 || r >= MaxReplicaID {
			return nil, fmt.Errorf("set members: replica id %d outside [0, %d): %w", r, MaxReplicaID, ErrArg)
		}
		replicas[i] = int(r)
	}
	if err := sh.SetMembers(int(req.Meta.Stage), from, replicas); err != nil {
		return nil, err
	}
	return &wire.Message{Type: wire.MsgAck, Meta: req.Meta, Text: ackApplied}, nil
}

// ids decodes tensor 0 of a request with want tensors in all: int64 [n],
// n within the cap.
func (s *Service) ids(req *wire.MessageView, want int) ([]int64, error) {
	if err := s.checkIDs(req, want); err != nil {
		return nil, err
	}
	return req.Tensors[0].Int64s(nil)
}

// idsInFrame is ids in place in the received frame where this host can
// read them so: for a request that is done with them before handle
// returns (a pull), since the frame is released then.
func (s *Service) idsInFrame(req *wire.MessageView, want int) ([]int64, error) {
	if err := s.checkIDs(req, want); err != nil {
		return nil, err
	}
	if v, ok := req.Tensors[0].Int64View(); ok {
		return v, nil
	}
	return req.Tensors[0].Int64s(nil)
}

// checkIDs checks that req carries want tensors, the first of at most
// MaxIDs int64 ids.
func (s *Service) checkIDs(req *wire.MessageView, want int) error {
	if len(req.Tensors) != want || req.Tensors[0].DType != wire.Int64 || len(req.Tensors[0].Shape) != 1 {
		return fmt.Errorf("%v: want %d tensors, the first int64 [n] ids: %w", req.Type, want, ErrArg)
	}
	if n := req.Tensors[0].Len(); n > s.opts.MaxIDs {
		return fmt.Errorf("%v: %d ids, limit %d: %w", req.Type, n, s.opts.MaxIDs, ErrArg)
	}
	return nil
}

// gradient is a pushed gradient tensor, in place in the received frame
// where this host can read it so: the shard copies what it keeps past the
// push (borrowGrad), and the frame is released only after the push.
func gradient(t *wire.TensorView) ([]float32, error) {
	if v, ok := t.Float32View(); ok {
		return v, nil
	}
	return t.Float32s(nil)
}

func pushIdentity(sh *Shard, req *wire.MessageView) (PushID, float64, error) {
	m := req.Meta
	if m.Stage > math.MaxInt32 || m.Replica > math.MaxInt32 {
		return PushID{}, 0, fmt.Errorf("push: stage %d, replica %d out of range: %w", m.Stage, m.Replica, ErrArg)
	}
	step, err := toInt64("step", m.Step)
	if err != nil {
		return PushID{}, 0, err
	}
	if m.Batch == 0 || m.Batch > 1<<53 {
		return PushID{}, 0, fmt.Errorf("push: weight (batch) %d, want 1..2^53: %w", m.Batch, ErrArg)
	}
	id := PushID{Job: sh.cfg.Job, Stage: int(m.Stage), Replica: int(m.Replica), Step: step}
	return id, float64(m.Batch), nil
}

// blockPart is the part of a block a pull's Meta.Micro asks for; the
// shard refuses parts its block lacks.
func blockPart(micro uint64) (int, error) {
	if micro > math.MaxInt32 {
		return 0, fmt.Errorf("block part %d out of range: %w", micro, ErrArg)
	}
	return int(micro), nil
}

func toInt64(what string, v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s %d out of range: %w", what, v, ErrArg)
	}
	return int64(v), nil
}

func ackMessage(req *wire.MessageView, ack Ack) *wire.Message {
	text := ackPending
	switch {
	case ack.Duplicate:
		text = ackDuplicate
	case ack.Applied:
		text = ackApplied
	}
	meta := req.Meta
	meta.Micro = uint64(ack.Version)
	return &wire.Message{Type: wire.MsgAck, Meta: meta, Text: text}
}
