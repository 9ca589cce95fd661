package ps

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// histogramCount is how many observations the series op/param holds.
func histogramCount(t *testing.T, m *ClientMetrics, op, param string) uint64 {
	t.Helper()
	var out dto.Metric
	if err := m.latency.WithLabelValues(op, param).(prometheus.Metric).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// TestClientTimesPullsAndPushes: three steps of pulls and pushes on a
// remote and a local shard land in the four histograms, one observation
// per call.
func TestClientTimesPullsAndPushes(t *testing.T) {
	checkLeaks(t)
	m, err := NewClientMetrics(prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mixed, local := twoShards(t, 1), twoShards(t, 1)
	addr := served(t, ServiceOptions{}, mixed[1])
	c, err := NewClient(ClientConfig{Job: "j", Stage: 0, Replica: 0, Shards: 2, Timeout: 5 * time.Second,
		Dial:    dialer(addr),
		Local:   func(shard int) *Shard { return map[int]*Shard{0: mixed[0]}[shard] },
		Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// 3 steps: each call once per step, blocks pulled six times (PullBlock,
	// PullBlockInto, and PullBlockStateInto of the values, Adam's two state
	// buffers and a third it lacks), and once more into a buffer of the
	// wrong length.
	checkClientAgainstShards(t, c, local)
	for _, s := range []struct {
		op, param string
		want      uint64
	}{{opPull, paramTable, 3}, {opPull, paramBlock, 3*6 + 1}, {opPush, paramTable, 3}, {opPush, paramBlock, 3}} {
		if n := histogramCount(t, m, s.op, s.param); n != s.want {
			t.Errorf("%s %s: %d observations, want %d", s.op, s.param, n, s.want)
		}
	}
}

// TestShardBytesGrowWithRows: a shard holds its blocks from the start and
// RowBytes more for every row a pull creates.
func TestShardBytesGrowWithRows(t *testing.T) {
	s, err := NewShard(testConfig(t, BSP, 0, 1, 1, adam))
	if err != nil {
		t.Fatal(err)
	}
	before := s.Bytes()
	if before <= 0 {
		t.Fatalf("a shard with a block holds %d bytes", before)
	}
	if _, _, err := s.PullRows(context.Background(), testTable, []int64{1, 2, 3}, 0); err != nil {
		t.Fatal(err)
	}
	per := s.tables[testTable].rowBytes()
	if got := s.Bytes() - before; s.Rows() != 3 || got != 3*per {
		t.Errorf("3 rows: %d rows, %d more bytes, want 3 and %d", s.Rows(), got, 3*per)
	}
}
