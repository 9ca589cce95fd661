package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
	"github.com/heterps/heterps/daemon/batching"
)

func init() {
	registerStoppable("resize", "change which replicas of a running data-parallel job train, and their batches, or add replicas on free nodes", runResize)
}

const resizeUsage = "usage: heterps resize JOB REPLICA[=BATCH]... [--coordinator URL] [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json]\n" +
	"  REPLICA is a node's name as heterps status shows it, or rK for replica K; the replicas named keep training from the\n" +
	"  next step, the others stop. A live node's name that runs no replica of the job adds one there, joining a few\n" +
	"  heartbeats ahead (a job that syncs through the parameter servers only). Give BATCH for every replica named or for\n" +
	"  none: given, they must add up to the job's batch; else that batch is split over the replicas named in proportion to\n" +
	"  their batches now, an added replica counting as one of the stage's average batch."

// growTries and growWait bound how long resize retries a grow the
// coordinator refuses until an earlier change has reached every replica.
const (
	growTries = 20
	growWait  = 500 * time.Millisecond
)

// runResize resizes the single data-parallel stage of a running job (or of
// the live restart of a restarted one) in place: PATCH /v1/jobs/{id}.
func runResize(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return jobControl{name: "resize", usage: resizeUsage, jsonHelp: "print the resized job's status as JSON",
		check: func(args []string) error {
			if len(args) < 2 || args[0] == "" {
				return fmt.Errorf("want JOB and at least one REPLICA, got %q", args)
			}
			return nil
		},
		act: resizeJob}.run(ctx, args, stdout, stderr)
}

// resizeJob sends the resize args[1:] ask for to job args[0]'s live end.
func resizeJob(ctx context.Context, c *coordClient, args []string) (api.JobStatus, string, error) {
	s, err := c.liveEnd(ctx, args[0])
	if err != nil {
		return s, "", err
	}
	if s.State != api.JobRunning || len(s.Stages) != 1 {
		return s, "", fmt.Errorf("job %s is %s with %d stage(s): only a running single-stage job changes its replicas", s.ID, s.State, len(s.Stages))
	}
	req, err := resizeRequest(args[1:], s.Stages[0])
	if err != nil {
		return s, "", usageError{fmt.Errorf("job %s: %w", s.ID, err)}
	}
	if s, err = c.resizeOrGrow(ctx, s.ID, req); err != nil || len(s.Stages) == 0 {
		return s, fmt.Sprintf("job %s: resized", s.ID), err
	}
	if s.JoiningAt > 0 {
		return s, fmt.Sprintf("job %s: stage 0 runs %s from step %d, when the added replicas join", s.ID, describeSplit(s.Stages[0]), s.JoiningAt), nil
	}
	return s, fmt.Sprintf("job %s: stage 0 now runs %s from its next step", s.ID, describeSplit(s.Stages[0])), nil
}

func (c *coordClient) resize(ctx context.Context, id string, req api.ResizeRequest) (api.JobStatus, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.JobStatus{}, err
	}
	var s api.JobStatus
	err = c.Do(ctx, apiclient.Request{Method: http.MethodPatch, Path: "/v1/jobs/" + url.PathEscape(id),
		ContentType: api.ContentTypeJSON, Body: body}, &s)
	return s, err
}

// resizeOrGrow sends req; one that adds replicas is sent again while the
// coordinator answers that the replicas have not all taken the job's
// latest change yet (409, "try again").
func (c *coordClient) resizeOrGrow(ctx context.Context, id string, req api.ResizeRequest) (api.JobStatus, error) {
	for try := 1; ; try++ {
		s, err := c.resize(ctx, id, req)
		var se *apiclient.StatusError
		if len(req.Add) == 0 || try == growTries || !errors.As(err, &se) || se.Code != http.StatusConflict || !strings.Contains(se.Message, "try again") {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, err
		case <-time.After(growWait):
		}
	}
}

var replicaID = regexp.MustCompile(`^r([0-9]+)$`)

// resizeRequest turns REPLICA[=BATCH] arguments into the request for stage
// st, whose batches now add up to the job's batch.
func resizeRequest(specs []string, st api.StageStatus) (api.ResizeRequest, error) {
	if len(st.Replicas) != len(st.Nodes) || len(st.Batches) != len(st.Nodes) {
		return api.ResizeRequest{}, errors.New("the coordinator's status names no replica ids (an older coordinator?)")
	}
	// at indexes st's replicas; an added replica has at = -1 and a node.
	type kept struct {
		at, batch int
		node      string
	}
	var keep []kept
	given := 0
	for _, spec := range specs {
		name, batch, hasBatch := strings.Cut(spec, "=")
		at, err := replicaIndex(name, st)
		var none noReplica
		switch {
		case errors.As(err, &none) && name != "" && replicaID.FindStringSubmatch(name) == nil:
			at = -1 // a node running no replica: add one there
		case err != nil:
			return api.ResizeRequest{}, err
		}
		k := kept{at: at}
		if at < 0 {
			k.node = name
		}
		if slices.ContainsFunc(keep, func(o kept) bool { return o.at == k.at && o.node == k.node }) {
			return api.ResizeRequest{}, fmt.Errorf("%s named twice", describeNamed(k.node, st, at))
		}
		if hasBatch {
			given++
			if k.batch, err = strconv.Atoi(batch); err != nil || k.batch < 1 {
				return api.ResizeRequest{}, fmt.Errorf("%s: the batch must be a whole number >= 1, got %q", name, batch)
			}
		}
		keep = append(keep, k)
	}
	total := sum(st.Batches)
	switch given {
	case len(keep):
		got := 0
		for _, k := range keep {
			got += k.batch
		}
		if got != total {
			return api.ResizeRequest{}, fmt.Errorf("the batches given add up to %d; the job's batch is %d", got, total)
		}
	case 0:
		weights := make([]float64, len(keep))
		for i, k := range keep {
			weights[i] = float64(total) / float64(len(st.Batches))
			if k.at >= 0 {
				weights[i] = float64(st.Batches[k.at])
			}
		}
		shares, err := batching.Split(total, weights, nil, nil)
		if err != nil {
			return api.ResizeRequest{}, err
		}
		for i := range keep {
			keep[i].batch = shares[i]
		}
	default:
		return api.ResizeRequest{}, fmt.Errorf("a batch for %d of the %d replicas named: give one for every replica or for none", given, len(keep))
	}
	if slices.ContainsFunc(keep, func(k kept) bool { return k.batch < 1 }) {
		return api.ResizeRequest{}, fmt.Errorf("the job's batch %d leaves a replica no rows: name fewer replicas", total)
	}
	req := api.ResizeRequest{Stage: st.Stage}
	for _, k := range keep {
		if k.at < 0 {
			req.Add = append(req.Add, api.NewReplica{Node: k.node, Batch: k.batch})
		}
	}
	keep = slices.DeleteFunc(keep, func(k kept) bool { return k.at < 0 })
	slices.SortFunc(keep, func(a, b kept) int { return st.Replicas[a.at] - st.Replicas[b.at] })
	for _, k := range keep {
		req.Replicas, req.Batches = append(req.Replicas, st.Replicas[k.at]), append(req.Batches, k.batch)
	}
	return req, nil
}

// replicaIndex finds name, a node's name or rK, among st's replicas.
func replicaIndex(name string, st api.StageStatus) (int, error) {
	if m := replicaID.FindStringSubmatch(name); m != nil {
		id, err := strconv.Atoi(m[1])
		if at := slices.Index(st.Replicas, id); err == nil && at >= 0 {
			return at, nil
		}
	}
	var on []int
	for at, n := range st.Nodes {
		if n == name {
			on = append(on, at)
		}
	}
	switch len(on) {
	case 1:
		return on[0], nil
	case 0:
		return 0, noReplica{fmt.Errorf("no replica %q; the stage runs %s", name, describeSplit(st))}
	}
	return 0, fmt.Errorf("node %s runs %d replicas; name them as rK: the stage runs %s", name, len(on), describeSplit(st))
}

// describeNamed is "replica rK" for a replica at index at, else "node N".
func describeNamed(node string, st api.StageStatus, at int) string {
	if at >= 0 {
		return fmt.Sprintf("replica r%d", st.Replicas[at])
	}
	return "node " + node
}

// noReplica: a name is neither a replica id nor the node of a replica.
type noReplica struct{ error }

// describeSplit is "n0 (r0) b=256, n1 (r1) b=256".
func describeSplit(st api.StageStatus) string {
	var parts []string
	for i, n := range st.Nodes {
		part := n
		if i < len(st.Replicas) {
			part += fmt.Sprintf(" (r%d)", st.Replicas[i])
		}
		if i < len(st.Batches) {
			part += fmt.Sprintf(" b=%d", st.Batches[i])
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
