package ps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// budgetShard is a one-shard test shard with room for its Adam block and
// exactly rows table rows of Adam (values and two state buffers).
func budgetShard(t *testing.T, rows int64) *Shard {
	t.Helper()
	cfg := testConfig(t, BSP, 0, 1, 1, adam)
	cfg.MemoryBytes = testLen*3*4 + rows*RowBytes(testDim, 2)
	s, err := NewShard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMemoryBudgetRefusesRowsPastIt(t *testing.T) {
	s := budgetShard(t, 10)
	pullRows(t, s, []int64{0, 1, 2, 3, 4, 5, 6, 7}, 0)
	_, _, err := s.PullRows(context.Background(), testTable, []int64{1, 8, 9, 10}, 0)
	per := RowBytes(testDim, 2)
	for _, want := range []string{testTable, "3 new rows", fmt.Sprintf("%d bytes each", per), fmt.Sprintf("budget of %d bytes", testLen*3*4+10*per)} {
		if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), want) {
			t.Fatalf("pull of 3 new rows beside 8 in a budget of 10: %v, want ErrMemoryBudget naming %q", err, want)
		}
	}
	if s.Rows() != 8 {
		t.Errorf("%d rows after a refused pull, want 8", s.Rows())
	}
	if _, err := s.PushRows(id(0, 1), testTable, 1, []int64{20, 21, 22}, make([]float32, 3*testDim)); !errors.Is(err, ErrMemoryBudget) {
		t.Errorf("push creating 3 rows beside 8 in a budget of 10: %v, want ErrMemoryBudget", err)
	}
	pullRows(t, s, []int64{8, 9, 3}, 0) // exactly at the budget: the shard still serves
	if s.Rows() != 10 {
		t.Errorf("%d rows, want 10", s.Rows())
	}
	pullBlock(t, s, 0)
}

func TestMemoryBudgetZeroIsUnlimited(t *testing.T) {
	s := newTestShard(t, BSP, 1, adam)
	pullRows(t, s, idsOn(0, 1, 1000), 0)
	if s.Rows() != 1000 {
		t.Fatalf("%d rows", s.Rows())
	}
}

func TestMemoryBudgetTooSmallForTheBlocks(t *testing.T) {
	cfg := testConfig(t, BSP, 0, 1, 1, adam)
	cfg.MemoryBytes = testLen*3*4 - 1
	if _, err := NewShard(cfg); !errors.Is(err, ErrMemoryBudget) {
		t.Fatalf("got %v, want ErrMemoryBudget", err)
	}
	cfg.MemoryBytes = -1
	if _, err := NewShard(cfg); !errors.Is(err, ErrArg) {
		t.Fatalf("negative budget: got %v, want ErrArg", err)
	}
}

func TestMemoryBudgetErrorReachesRemoteClientsAndServiceGoesOn(t *testing.T) {
	checkLeaks(t)
	s := budgetShard(t, 4)
	c := newClient(t, served(t, ServiceOptions{}, s), 1, 0)
	ctx := context.Background()
	if _, _, err := c.Pull(ctx, testTable, []int64{1, 2, 3, 4, 5}, 0); err == nil || !strings.Contains(err.Error(), ErrMemoryBudget.Error()) {
		t.Fatalf("remote pull past the budget: %v, want the budget error", err)
	}
	if _, _, err := c.Pull(ctx, testTable, []int64{1, 2, 3, 4}, 0); err != nil {
		t.Fatalf("pull within the budget after a refused one: %v", err)
	}
}
