package api

import "time"

// MaxProfileBytes caps the body of PUT /v1/profiles/{model}: a profile of
// 64 layers on 64 types is about 0.4 MB of TOML.
const MaxProfileBytes = 4 << 20

// Profile is one stored measured profile: the layer times of one model on
// one resource type, as `heterps profile` measured them (GET /v1/profiles
// lists them without their layers).
type Profile struct {
	Model string `json:"model"`
	Type  string `json:"type"`
	// Layers is the number of layers profiled; ProfileBatch the batch B_o
	// they were measured at.
	Layers       int `json:"layers"`
	ProfileBatch int `json:"profile_batch"`
	// Fingerprint identifies the model's layer shapes when the
	// coordinator knew the model (a zoo name) as the profile was stored;
	// a job's model plans on the profile only if its shapes have the same
	// fingerprint. Empty: only the layer count is checked.
	Fingerprint string    `json:"fingerprint,omitempty"`
	StoredAt    time.Time `json:"stored_at"`
}

// ProfilePutResponse answers PUT /v1/profiles/{model}: the types stored
// (each replacing the earlier profile of its model and type), the types
// the body's header marks as roofline estimates (not stored), and the
// stored types the coordinator's catalog does not have (stored anyway:
// the catalog may change).
type ProfilePutResponse struct {
	Model        string    `json:"model"`
	Stored       []Profile `json:"stored"`
	Estimated    []string  `json:"estimated,omitempty"`
	NotInCatalog []string  `json:"not_in_catalog,omitempty"`
}
