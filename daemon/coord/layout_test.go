package coord

import (
	"fmt"
	"testing"

	"github.com/heterps/heterps/daemon/api"
)

// TestTasksCarryLayoutAndPSAddr: every task lists each stage's layers and
// replica count, and PS shards are reached at a node's ps_addr when it
// registers one (a node daemon serves stage links and shards on separate
// listeners).
func TestTasksCarryLayoutAndPSAddr(t *testing.T) {
	tc := startCluster(t, nil)
	plan := tc.expectedPlan(ctrJob)
	var nodes []*fakeNode
	port := 9100
	for _, s := range plan.Stages {
		for range s.Units {
			port++
			n := newFakeNode(fmt.Sprintf("%s-%d", s.Type, port), s.Type, 1, port)
			n.req.PSAddr = fmt.Sprintf("127.0.0.1:%d", port+1000)
			tc.start(n)
			nodes = append(nodes, n)
		}
	}
	ps := newFakeNode("ps-node", firstCPUType(tc.cat), 1, 9200)
	ps.req.PSAddr = "127.0.0.1:9201"
	tc.start(ps)
	nodes = append(nodes, ps)
	s := tc.waitJob(tc.submit(ctrJob))
	if s.State != api.JobDone {
		t.Fatalf("job %s (%s)", s.State, s.Reason)
	}
	psAddr := ""
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		for _, task := range received {
			if task.Role == api.RolePS {
				psAddr = n.req.PSAddr
			}
		}
	}
	if psAddr == "" {
		t.Fatal("no node got the PS task")
	}
	for _, n := range nodes {
		received, _, _ := n.snapshot()
		for _, task := range received {
			if len(task.Layout) != len(plan.Stages) {
				t.Fatalf("task %s: layout %+v, plan has %d stages", task.TaskID, task.Layout, len(plan.Stages))
			}
			for i, l := range task.Layout {
				st := plan.Stages[i]
				if l.FirstLayer != st.First || l.LastLayer != st.Last || l.Replicas != st.Units {
					t.Errorf("task %s: stage %d laid out as %+v, plan %+v", task.TaskID, i, l, st)
				}
			}
			for _, addr := range task.PS {
				if addr != psAddr {
					t.Errorf("task %s: PS at %s, want the hosting node's ps_addr %s", task.TaskID, addr, psAddr)
				}
			}
		}
	}
}
