package ps

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heterps/heterps/daemon/initrow"
	"github.com/heterps/heterps/daemon/wire"
)

// BlockShard is the shard, of nshards, that dense block name is declared
// on: the FNV-1a hash of the name modulo nshards. Jobs place blocks by it
// so that clients find them without a table of placements.
func BlockShard(name string, nshards int) int {
	return int(initrow.NameHash(name) % uint64(nshards))
}

// ErrRemote wraps the reason a service answered a request with MsgError.
var ErrRemote = errors.New("parameter server refused the request")

// ClientConfig configures a Client: whose pushes it makes and how it
// reaches each shard.
type ClientConfig struct {
	Job     string
	Stage   int
	Replica int
	Shards  int
	// Dial returns a connection that reaches shard i's service. The client
	// owns it (one request per shard in flight on it) and closes it; it
	// dials again after a connection drops.
	Dial func(ctx context.Context, shard int) (*wire.Conn, error)
	// Timeout bounds each request, a BSP pull's wait included; 0 = 60s.
	Timeout time.Duration
	// Retries is how often a request is resent on a fresh connection after
	// the old one dropped; 0 = 3. Resent pushes are safe: a shard applies a
	// push identity at most once.
	Retries int
	// Lanes is how many requests to one shard may be in flight at once,
	// each on its own connection; 0 = DefaultLanes.
	Lanes int
	// Local, if set, returns shard i when this process hosts it, else nil.
	// Requests to a local shard call it directly: no encoding, no copy
	// through the kernel, no connection; the same checks and exactly-once
	// rules apply.
	Local func(shard int) *Shard
	// Metrics, if set, times every pull and push (metrics.go).
	Metrics *ClientMetrics
}

// DefaultLanes is the default of ClientConfig.Lanes: enough for a stage's
// pushes and the pulls ahead of its dense blocks to be in flight at once
// (ctrdnn has 10 blocks and a table; with 4 lanes a pull waited ~0.5 ms
// for one).
const DefaultLanes = 16

// Client pulls and pushes a job's parameters over the shards' services:
// row ids spread over shards by ShardOf, blocks found by BlockShard. Its
// methods are safe for concurrent use; up to Lanes requests per shard are
// in flight at once (a BSP pull waiting for a step does not hold up the
// pushes that complete it), requests to different shards in parallel.
type Client struct {
	cfg   ClientConfig
	job   uint64
	lanes []chan *shardLink // per shard: the idle lanes
	all   []*shardLink
}

// shardLink is one lane to one shard: a connection that carries one
// request at a time. Whoever took it from its shard's idle channel owns it.
type shardLink struct {
	index int
	conn  *wire.Conn
}

// NewClient returns a client; it dials lazily, on each shard's first request.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Job == "":
		return nil, fmt.Errorf("ps client: no job: %w", ErrArg)
	case cfg.Shards < 1:
		return nil, fmt.Errorf("ps client: %d shards: %w", cfg.Shards, ErrArg)
	case cfg.Dial == nil:
		return nil, fmt.Errorf("ps client: no Dial: %w", ErrArg)
	case cfg.Stage < 0 || cfg.Replica < 0:
		return nil, fmt.Errorf("ps client: stage %d replica %d: %w", cfg.Stage, cfg.Replica, ErrArg)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 3
	}
	if cfg.Lanes <= 0 {
		cfg.Lanes = DefaultLanes
	}
	c := &Client{cfg: cfg, job: JobKey(cfg.Job), lanes: make([]chan *shardLink, cfg.Shards)}
	for i := range c.lanes {
		c.lanes[i] = make(chan *shardLink, cfg.Lanes)
		for range cfg.Lanes {
			l := &shardLink{index: i}
			c.lanes[i] <- l
			c.all = append(c.all, l)
		}
	}
	return c, nil
}

// Close closes the client's connections. Call it when no request is in
// flight.
func (c *Client) Close() error {
	for _, l := range c.all {
		l.drop()
	}
	return nil
}

// Pull returns the rows of ids of table (len(ids) x dim, in the order
// given, repeats included) once every shard's copy of the table has
// reached version after, and the smallest version they were read at.
func (c *Client) Pull(ctx context.Context, table string, ids []int64, after int64) ([]float32, int64, error) {
	defer c.cfg.Metrics.since(opPull, paramTable, time.Now())
	byShard, at := c.partition(ids)
	replies := make([][]float32, c.cfg.Shards)
	versions := make([]int64, c.cfg.Shards)
	err := c.eachShard(func(i int) error {
		if len(byShard[i]) == 0 {
			versions[i] = -1
			return nil
		}
		if s := c.local(i); s != nil {
			ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
			defer cancel()
			var err error
			replies[i], versions[i], err = s.PullRows(ctx, table, byShard[i], after)
			return err
		}
		m := &wire.Message{Type: wire.MsgPull, Meta: c.meta(table, after, 0),
			Tensors: []wire.Tensor{wire.I64Tensor(byShard[i], len(byShard[i]))}}
		rows, v, err := c.pullFrom(ctx, i, m, len(byShard[i]))
		replies[i], versions[i] = rows, v
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("ps client: pull %q: %w", table, err)
	}
	if len(ids) == 0 {
		return nil, after, nil
	}
	if c.cfg.Shards == 1 { // the one reply is in the order of ids
		return replies[0], versions[0], nil
	}
	dim := 0
	version := int64(-1)
	for i, rows := range replies {
		if len(byShard[i]) > 0 {
			dim = len(rows) / len(byShard[i])
			if version < 0 || versions[i] < version {
				version = versions[i]
			}
		}
	}
	out := make([]float32, len(ids)*dim)
	for i, rows := range replies {
		for j, pos := range at[i] {
			copy(out[pos*dim:(pos+1)*dim], rows[j*dim:(j+1)*dim])
		}
	}
	return out, version, nil
}

// PullInto is Pull writing the row of ids[j] into row at[j] of dst (dim
// floats a row; at nil: row j) and returning the version: from a shard in
// this process the rows are copied once, straight from the table, with
// nothing allocated for them.
func (c *Client) PullInto(ctx context.Context, table string, ids []int64, after int64, dst []float32, dim int, at []int64) (int64, error) {
	if s := c.local(0); c.cfg.Shards == 1 && s != nil && len(ids) > 0 {
		defer c.cfg.Metrics.since(opPull, paramTable, time.Now())
		ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
		version, err := s.PullRowsInto(ctx, table, ids, after, dst, dim, at)
		if err != nil {
			return 0, fmt.Errorf("ps client: pull %q: %w", table, err)
		}
		return version, nil
	}
	if err := checkDestination(ids, dst, dim, at); err != nil {
		return 0, fmt.Errorf("ps client: pull %q: %w", table, err)
	}
	v, version, err := c.Pull(ctx, table, ids, after)
	if err != nil {
		return 0, err
	}
	if len(v) != len(ids)*dim {
		return 0, fmt.Errorf("ps client: pull %q: %d floats for %d rows of %d", table, len(v), len(ids), dim)
	}
	if at == nil {
		copy(dst, v)
	}
	for j, r := range at {
		copy(dst[int(r)*dim:int(r+1)*dim], v[j*dim:(j+1)*dim])
	}
	return version, nil
}

// PullBlock returns dense block name once its version is at least after,
// and the version it was read at.
func (c *Client) PullBlock(ctx context.Context, name string, after int64) ([]float32, int64, error) {
	defer c.cfg.Metrics.since(opPull, paramBlock, time.Now())
	i := BlockShard(name, c.cfg.Shards)
	var v []float32
	var version int64
	var err error
	if s := c.local(i); s != nil {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
		v, version, err = s.PullBlock(ctx, name, after)
	} else {
		m := &wire.Message{Type: wire.MsgPull, Meta: c.meta(name, after, 0)}
		v, version, err = c.pullFrom(ctx, i, m, -1)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ps client: pull %q: %w", name, err)
	}
	return v, version, nil
}

// PullBlockInto is PullBlock into dst, which must have the block's length:
// a local shard copies the block straight into it, a remote one's reply is
// decoded into it.
func (c *Client) PullBlockInto(ctx context.Context, name string, after int64, dst []float32) (int64, error) {
	return c.PullBlockStateInto(ctx, name, after, BlockValue, dst)
}

// PullBlockStateInto is PullBlockInto of part of the block: its values
// (BlockValue) or, for part k+1, its optimiser's state buffer k
// (Shard.PullBlockStateInto).
func (c *Client) PullBlockStateInto(ctx context.Context, name string, after int64, part int, dst []float32) (int64, error) {
	defer c.cfg.Metrics.since(opPull, paramBlock, time.Now())
	i := BlockShard(name, c.cfg.Shards)
	var version int64
	var err error
	if s := c.local(i); s != nil {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
		version, err = s.PullBlockStateInto(ctx, name, after, part, dst)
	} else {
		m := &wire.Message{Type: wire.MsgPull, Meta: c.meta(name, after, 0)}
		m.Meta.Micro = uint64(part)
		version, err = c.pullInto(ctx, i, m, dst)
	}
	if err != nil {
		if part != BlockValue {
			name = fmt.Sprintf("%s (part %d)", name, part)
		}
		return 0, fmt.Errorf("ps client: pull %q: %w", name, err)
	}
	return version, nil
}

// PushRows pushes the sparse gradient of table for step: distinct ids and
// their rows (grad is len(ids) x dim), weight the replica's batch size.
// Every shard gets a push, with no rows if it holds none of the ids, as the
// BSP barrier needs.
func (c *Client) PushRows(ctx context.Context, table string, step int64, weight int, ids []int64, grad []float32, dim int) error {
	defer c.cfg.Metrics.since(opPush, paramTable, time.Now())
	if len(grad) != len(ids)*dim {
		return fmt.Errorf("ps client: push %q: %d gradient floats for %d rows of %d: %w", table, len(grad), len(ids), dim, ErrArg)
	}
	byShard, at := c.partition(ids)
	err := c.eachShard(func(i int) error {
		g := grad // one shard: its ids are ids, in order
		if at != nil {
			g = make([]float32, len(at[i])*dim)
			for j, pos := range at[i] {
				copy(g[j*dim:(j+1)*dim], grad[pos*dim:(pos+1)*dim])
			}
		}
		if s := c.local(i); s != nil {
			_, err := s.PushRows(c.pushID(step), table, float64(weight), byShard[i], g)
			return err
		}
		m := &wire.Message{Type: wire.MsgPushSparse, Meta: c.meta(table, step, weight),
			Tensors: []wire.Tensor{wire.I64Tensor(byShard[i], len(byShard[i])), wire.F32Tensor(g, len(byShard[i]), dim)}}
		return c.push(ctx, i, m)
	})
	if err != nil {
		return fmt.Errorf("ps client: push %q step %d: %w", table, step, err)
	}
	return nil
}

// PushBlock pushes the gradient of dense block name for step.
func (c *Client) PushBlock(ctx context.Context, name string, step int64, weight int, grad []float32) error {
	defer c.cfg.Metrics.since(opPush, paramBlock, time.Now())
	i := BlockShard(name, c.cfg.Shards)
	var err error
	if s := c.local(i); s != nil {
		_, err = s.PushBlock(c.pushID(step), name, float64(weight), grad)
	} else {
		m := &wire.Message{Type: wire.MsgPushDense, Meta: c.meta(name, step, weight),
			Tensors: []wire.Tensor{wire.F32Tensor(grad, len(grad))}}
		err = c.push(ctx, i, m)
	}
	if err != nil {
		return fmt.Errorf("ps client: push %q step %d: %w", name, step, err)
	}
	return nil
}

// AssignBlock gives dense block name part (BlockValue, or 1+k for its
// optimiser's state buffer k) of its state after step (Shard.AssignBlock);
// the block takes the step once every part is in.
func (c *Client) AssignBlock(ctx context.Context, name string, step int64, part int, v []float32) error {
	defer c.cfg.Metrics.since(opPush, paramBlock, time.Now())
	i := BlockShard(name, c.cfg.Shards)
	var err error
	if s := c.local(i); s != nil {
		_, err = s.AssignBlock(c.pushID(step), name, part, v)
	} else {
		m := &wire.Message{Type: MsgAssignBlock, Meta: c.meta(name, step, 1), Tensors: []wire.Tensor{wire.F32Tensor(v, len(v))}}
		m.Meta.Micro = uint64(part)
		err = c.push(ctx, i, m)
	}
	if err != nil {
		return fmt.Errorf("ps client: assign %q part %d at step %d: %w", name, part, step, err)
	}
	return nil
}

// SetMembers makes replicas the members of the client's stage from step
// fromStep on, on every shard (Shard.SetMembers). It is idempotent: a
// caller may resend it, and several callers may send the same change.
func (c *Client) SetMembers(ctx context.Context, fromStep int64, replicas []int) error {
	ids := make([]int64, len(replicas))
	for i, r := range replicas {
		ids[i] = int64(r)
	}
	err := c.eachShard(func(i int) error {
		if s := c.local(i); s != nil {
			return s.SetMembers(c.cfg.Stage, fromStep, replicas)
		}
		m := &wire.Message{Type: MsgSetMembers, Meta: c.meta("", fromStep, 0),
			Tensors: []wire.Tensor{wire.I64Tensor(ids, len(ids))}}
		m.Meta.Key = 0
		return c.push(ctx, i, m)
	})
	if err != nil {
		return fmt.Errorf("ps client: set members of stage %d from step %d to %v: %w", c.cfg.Stage, fromStep, replicas, err)
	}
	return nil
}

// AwaitReady waits until every shard the client reaches over the wire
// answers (MsgReady): a parameter-server node restoring a large checkpoint
// takes as long as reading it. It asks again, every retryEvery at most,
// for as long as ctx lasts — a shard's node that died is the
// coordinator's to find, and it stops the job — calling waiting, if not
// nil, each time a shard has not answered.
func (c *Client) AwaitReady(ctx context.Context, waiting func(shard int, err error)) error {
	return c.eachShard(func(i int) error {
		for wait := 50 * time.Millisecond; ; wait = min(2*wait, retryEvery) {
			if c.local(i) != nil {
				return nil
			}
			m := &wire.Message{Type: MsgReady, Meta: c.meta("", 0, 0)}
			m.Meta.Key = 0
			err := c.push(ctx, i, m)
			if err == nil || errors.Is(err, ErrRemote) {
				return err // an answer: the service is up, if not right
			}
			if ctx.Err() != nil {
				return fmt.Errorf("ps client: shard %d not up: %w (last: %v)", i, ctx.Err(), err)
			}
			if waiting != nil {
				waiting(i, err)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	})
}

// retryEvery is the longest AwaitReady waits between two questions.
const retryEvery = 2 * time.Second

// partition splits ids by shard (Partition); with one shard it returns ids
// as they are and no positions (at is nil): nothing to split or gather.
func (c *Client) partition(ids []int64) (byShard [][]int64, at [][]int) {
	if c.cfg.Shards == 1 {
		return [][]int64{ids}, nil
	}
	return Partition(ids, c.cfg.Shards)
}

// AllLocal reports whether this process hosts every shard (Local): calls
// then wait on no other process.
func (c *Client) AllLocal() bool {
	for i := range c.cfg.Shards {
		if c.local(i) == nil {
			return false
		}
	}
	return true
}

// local returns shard i if this process hosts it.
func (c *Client) local(i int) *Shard {
	if c.cfg.Local == nil {
		return nil
	}
	return c.cfg.Local(i)
}

func (c *Client) pushID(step int64) PushID {
	return PushID{Job: c.cfg.Job, Stage: c.cfg.Stage, Replica: c.cfg.Replica, Step: step}
}

func (c *Client) meta(name string, step int64, weight int) wire.Meta {
	return wire.Meta{Job: c.job, Stage: uint64(c.cfg.Stage), Replica: uint64(c.cfg.Replica),
		Step: uint64(step), Key: ParamKey(name), Batch: uint64(weight)}
}

// eachShard runs f for every shard in parallel and returns the first error.
func (c *Client) eachShard(f func(i int) error) error {
	if c.cfg.Shards == 1 {
		return f(0)
	}
	errs := make([]error, c.cfg.Shards)
	var wg sync.WaitGroup
	for i := range c.cfg.Shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pullFrom sends a pull to shard i and decodes the reply's float32 tensor;
// rows >= 0 checks it holds that many rows.
func (c *Client) pullFrom(ctx context.Context, i int, m *wire.Message, rows int) ([]float32, int64, error) {
	reply, err := c.call(ctx, i, m, wire.MsgPullReply)
	if err != nil {
		return nil, 0, err
	}
	defer reply.Release()
	if err := reply.Want(wire.Float32); err != nil {
		return nil, 0, fmt.Errorf("shard %d: %w", i, err)
	}
	t := &reply.Tensors[0]
	if rows >= 0 && (len(t.Shape) != 2 || t.Shape[0] != rows) {
		return nil, 0, fmt.Errorf("shard %d: reply shape %v for %d ids", i, t.Shape, rows)
	}
	v, err := t.Float32s(nil)
	return v, int64(reply.Meta.Step), err
}

// pullInto sends a block pull to shard i and decodes the reply, which must
// hold len(dst) floats, into dst.
func (c *Client) pullInto(ctx context.Context, i int, m *wire.Message, dst []float32) (int64, error) {
	reply, err := c.call(ctx, i, m, wire.MsgPullReply)
	if err != nil {
		return 0, err
	}
	defer reply.Release()
	if err := reply.Want(wire.Float32); err != nil {
		return 0, fmt.Errorf("shard %d: %w", i, err)
	}
	t := &reply.Tensors[0]
	if t.Len() != len(dst) {
		return 0, fmt.Errorf("shard %d: reply of %d floats for a buffer of %d", i, t.Len(), len(dst))
	}
	if _, err := t.Float32s(dst); err != nil {
		return 0, fmt.Errorf("shard %d: %w", i, err)
	}
	return int64(reply.Meta.Step), nil
}

func (c *Client) push(ctx context.Context, i int, m *wire.Message) error {
	reply, err := c.call(ctx, i, m, wire.MsgAck)
	if err != nil {
		return err
	}
	reply.Release()
	return nil
}

// Lanes is how many requests to one shard the client keeps in flight at
// once (ClientConfig.Lanes).
func (c *Client) Lanes() int { return c.cfg.Lanes }

// call sends m to shard i and returns the reply of type want, resending on
// a fresh connection when the connection drops. A MsgError reply is
// returned as an error wrapping ErrRemote, and not retried.
func (c *Client) call(ctx context.Context, i int, m *wire.Message, want wire.MsgType) (*wire.MessageView, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var l *shardLink
	select {
	case l = <-c.lanes[i]:
	case <-ctx.Done():
		return nil, fmt.Errorf("shard %d: waiting for a free lane: %w", i, ctx.Err())
	}
	defer func() { c.lanes[i] <- l }()
	var lastErr error
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		reply, err := c.roundTrip(ctx, l, m)
		if err == nil {
			reply, err = checkReply(reply, m, want, i)
			if err != nil && !errors.Is(err, ErrRemote) {
				l.drop() // out of step with the service: start afresh
			}
			return reply, err
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, wire.ErrClosed) {
			break
		}
	}
	return nil, fmt.Errorf("shard %d: %w", i, lastErr)
}

// roundTrip sends m and waits for the reply on l's connection, dialling
// first if needed. Any failure drops the connection: a reply still on its
// way must not answer the next request.
func (c *Client) roundTrip(ctx context.Context, l *shardLink, m *wire.Message) (*wire.MessageView, error) {
	if l.conn == nil {
		conn, err := c.cfg.Dial(ctx, l.index)
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		l.conn = conn
	}
	stream := ShardStream(l.index)
	err := l.conn.Send(ctx, stream, m)
	var reply *wire.MessageView
	if err == nil {
		reply, err = l.conn.RecvShared(ctx, stream) // every caller releases its reply
	}
	if err != nil {
		l.drop()
		return nil, err
	}
	return reply, nil
}

func (l *shardLink) drop() {
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

func checkReply(reply *wire.MessageView, req *wire.Message, want wire.MsgType, i int) (*wire.MessageView, error) {
	if reply.Type == wire.MsgError {
		defer reply.Release()
		return nil, fmt.Errorf("shard %d: %w: %s", i, ErrRemote, reply.Text)
	}
	if reply.Type != want || reply.Meta.Key != req.Meta.Key || reply.Meta.Job != req.Meta.Job {
		defer reply.Release()
		return nil, fmt.Errorf("shard %d: got %v for key %#x, want %v for key %#x", i, reply.Type, reply.Meta.Key, want, req.Meta.Key)
	}
	return reply, nil
}
