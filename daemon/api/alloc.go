package api

import "time"

// JobAlloc is a running job as the coordinator's allocator sees it
// (GET /v1/jobs/{id}, field alloc).
type JobAlloc struct {
	// Units is what the last epoch gave the job (one unit is one unit, a
	// core, of a node).
	Units int `json:"units"`
	// PredictedLoss is the loss the previous epoch's fit predicted for the
	// job's current step (0 before a fit); Loss the loss it reports.
	PredictedLoss float64 `json:"predicted_loss"`
	Loss          float64 `json:"loss"`
	// Quality is the normalised loss reduction (L_0 - L)/(L_0 - L_min),
	// L_min the fitted curve's floor; Target the job's
	// target_loss_reduction (0: none).
	Quality float64 `json:"quality"`
	Target  float64 `json:"target,omitempty"`
	// Priority is the job's priority weight.
	Priority float64 `json:"priority"`
}

// AllocStatus answers GET /v1/alloc: the allocator's policy and its last
// decision.
type AllocStatus struct {
	Policy  string     `json:"policy"` // "off" when the allocator is off
	EpochMS int64      `json:"epoch_ms"`
	Epochs  int64      `json:"epochs"` // decisions made so far
	At      *time.Time `json:"at,omitempty"`
	// DecisionMS is the time the last decision took (fits and
	// allocation), in milliseconds.
	DecisionMS float64      `json:"decision_ms"`
	Jobs       []AllocGrant `json:"jobs"`
}

// AllocGrant is one job's share of a decision.
type AllocGrant struct {
	JobID string `json:"job_id"`
	Node  string `json:"node"`
	Units int    `json:"units"`
	Was   int    `json:"was"`
	// Quality is the job's normalised loss reduction when decided.
	Quality float64 `json:"quality"`
}
