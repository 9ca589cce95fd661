// Package store keeps the coordinator's state — its jobs with their plans,
// placements, task generations, checkpoints seen and restart chains, the id
// counters, the measured profiles it plans on — in an embedded bbolt
// database, so that a restarted coordinator carries on where it stopped.
//
// There is one write path: callers hand the store records (values, never
// pointers into their own state) and get a channel that yields the commit's
// error. One goroutine owned by the store collects what is pending and
// commits it in a single fsynced transaction, so a burst of writes costs one
// fsync and no caller holds a lock across the disk. A later record for the
// same key replaces a pending earlier one. A commit that fails (a full
// disk) is retried by the writer, 1 s later and then at doubling spaces up
// to 30 s, with every write of it that no later record of its key has
// replaced, until one succeeds: a disk freed while the coordinator runs
// gets its state without waiting for the next change of each job. Reads
// happen once, at start-up (Load); afterwards the coordinator's memory is
// the read side.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/heterps/heterps/daemon/api"
)

// FileName is the database's name inside the state directory.
const FileName = "coordinator.db"

var (
	bucketJobs     = []byte("jobs")
	bucketMeta     = []byte("meta")
	bucketProfiles = []byte("profiles") // by ProfileKey; added to version 1 databases as they open
	keyLastJob     = []byte("last_job")
	keyLastNode    = []byte("last_node")
	keyDrained     = []byte("drained")   // the drained nodes' names, a JSON list
	keyThrottles   = []byte("throttles") // the CPU shares throttles asked of nodes, a JSON object by node name
	keyVersion     = []byte("version")
	allBuckets     = [][]byte{bucketJobs, bucketMeta, bucketProfiles}
)

// schemaVersion is written once; a database of another version is refused.
const schemaVersion = 1

// ErrClosed is returned for writes after Close.
var ErrClosed = errors.New("store: closed")

// Store is an open state database and its writer goroutine.
type Store struct {
	db   *bolt.DB
	path string

	mu      sync.Mutex
	pending map[string]write // by bucket + "/" + key
	waiters []chan error
	closed  bool
	// failures counts the commits that failed; lastErr is the latest
	// commit's error (nil once one succeeds).
	failures int64
	lastErr  error
	// retryIn is the wait before the next retry of a failed commit, 0
	// while commits succeed.
	retryIn time.Duration
	wake    chan struct{} // capacity 1: there is something pending
	stopped chan struct{} // closed when the writer has returned
	// committing says a batch taken from pending is being committed.
	committing bool
	fault      atomic.Pointer[func() error] // InjectCommitFault's
}

// The spaces between the retries of a failed commit: the first, doubling
// with every failed commit up to the last. Variables so that tests can
// shorten them.
var (
	firstRetry = time.Second
	lastRetry  = 30 * time.Second
)

type write struct {
	bucket, key []byte
	value       []byte // nil deletes
}

// Open opens (creating it and dir if needed) the state database in dir. A
// second coordinator on the same directory waits lockWait for the file
// lock and then fails, naming the file.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("store: no state directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: state directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("store: %s is locked by another process (another coordinator on this --state-dir?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := initialise(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	s := &Store{db: db, path: path, pending: map[string]write{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go s.writer()
	return s, nil
}

const lockWait = 2 * time.Second

func initialise(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keyVersion)
		if v == nil {
			return meta.Put(keyVersion, u64(schemaVersion))
		}
		if got := fromU64(v); got != schemaVersion {
			return fmt.Errorf("state of schema version %d; this coordinator reads version %d", got, schemaVersion)
		}
		return nil
	})
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

// Close commits what is pending, stops the writer and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.kick()
	<-s.stopped
	return s.db.Close()
}

// Health is how many commits have failed so far, retries included, and
// the latest commit's error, nil when it succeeded.
func (s *Store) Health() (failures int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures, s.lastErr
}

// Flushed yields once every write handed to the store before the call is
// committed (nil) or its commit has failed (the error); at once when
// nothing is pending, and while commits are failing, when waiting for the
// next retry would be waiting for a disk to be freed.
func (s *Store) Flushed() <-chan error {
	s.mu.Lock()
	closed, lastErr, idle := s.closed, s.lastErr, len(s.pending) == 0 && !s.committing
	s.mu.Unlock()
	switch {
	case closed:
		return result(ErrClosed)
	case lastErr != nil:
		return result(lastErr)
	case idle:
		return result(nil)
	}
	return s.enqueue()
}

// InjectCommitFault makes every commit call f first, inside its
// transaction, and fail with f's error when it returns one: tests hold or
// fail commits with it as a hung or full disk would. nil removes it.
func (s *Store) InjectCommitFault(f func() error) {
	if f == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&f)
}

// enqueue adds writes to the next commit and returns its result channel.
func (s *Store) enqueue(ws ...write) <-chan error {
	done := make(chan error, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		done <- ErrClosed
		return done
	}
	for _, w := range ws {
		s.pending[string(w.bucket)+"/"+string(w.key)] = w
	}
	s.waiters = append(s.waiters, done)
	s.mu.Unlock()
	s.kick()
	return done
}

func (s *Store) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writer commits pending writes, one transaction per wake-up, until Close;
// after a failed commit it also wakes to retry it.
func (s *Store) writer() {
	defer close(s.stopped)
	var retry <-chan time.Time
	for {
		select {
		case <-s.wake:
		case <-retry:
		}
		s.mu.Lock()
		batch, waiters, closed := s.pending, s.waiters, s.closed
		s.pending, s.waiters, s.committing = map[string]write{}, nil, true
		s.mu.Unlock()
		err := s.commit(batch)
		wait := s.settle(batch, err)
		for _, w := range waiters {
			w <- err
		}
		if closed {
			return
		}
		if retry = nil; wait > 0 {
			retry = time.After(wait)
		}
	}
}

// settle records a commit's outcome. A failed batch goes back to pending,
// but for the writes a later record of the same key has replaced and those
// no commit could ever store; it returns the wait before its retry, 0 when
// there is nothing to retry.
func (s *Store) settle(batch map[string]write, err error) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.committing = false
	if len(batch) == 0 {
		return 0
	}
	if s.lastErr = err; err == nil {
		s.retryIn = 0
		return 0
	}
	s.failures++
	for k, w := range batch {
		if _, replaced := s.pending[k]; !replaced && storable(w) {
			s.pending[k] = w
		}
	}
	if len(s.pending) == 0 {
		return 0
	}
	s.retryIn = min(max(2*s.retryIn, firstRetry), lastRetry)
	return s.retryIn
}

// storable is whether bbolt would take w at all: a write it refuses for its
// key or size fails every commit it is in.
func storable(w write) bool {
	return len(w.key) > 0 && len(w.key) <= bolt.MaxKeySize && len(w.value) <= bolt.MaxValueSize
}

func (s *Store) commit(batch map[string]write) error {
	if len(batch) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		if f := s.fault.Load(); f != nil {
			if err := (*f)(); err != nil {
				return err
			}
		}
		for _, w := range batch {
			b := tx.Bucket(w.bucket)
			var err error
			if w.value == nil {
				err = b.Delete(w.key)
			} else {
				err = b.Put(w.key, w.value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: commit to %s: %w", s.path, err)
	}
	return nil
}

// PutJob records a job (replacing its earlier record).
func (s *Store) PutJob(j Job) <-chan error {
	v, err := json.Marshal(j)
	if err != nil {
		return result(fmt.Errorf("store: job %s: %w", j.ID, err))
	}
	return s.enqueue(write{bucket: bucketJobs, key: []byte(j.ID), value: v})
}

// DeleteJob forgets a job.
func (s *Store) DeleteJob(id string) <-chan error {
	return s.enqueue(write{bucket: bucketJobs, key: []byte(id)})
}

// PutCounters records the id counters.
func (s *Store) PutCounters(c Counters) <-chan error {
	return s.enqueue(write{bucket: bucketMeta, key: keyLastJob, value: u64(c.LastJob)},
		write{bucket: bucketMeta, key: keyLastNode, value: u64(c.LastNode)})
}

// PutDrained records the names of the nodes being drained (all of them:
// the record replaces the one before).
func (s *Store) PutDrained(names []string) <-chan error {
	v, err := json.Marshal(names)
	if err != nil {
		return result(fmt.Errorf("store: drained nodes: %w", err))
	}
	return s.enqueue(write{bucket: bucketMeta, key: keyDrained, value: v})
}

// PutThrottles records the CPU share the latest throttle asked of each
// node, by node name (all of them: the record replaces the one before).
func (s *Store) PutThrottles(shares map[string]float64) <-chan error {
	v, err := json.Marshal(shares)
	if err != nil {
		return result(fmt.Errorf("store: throttles: %w", err))
	}
	return s.enqueue(write{bucket: bucketMeta, key: keyThrottles, value: v})
}

// PutProfile records a measured profile, replacing the one of the same
// model and type.
func (s *Store) PutProfile(p Profile) <-chan error {
	v, err := json.Marshal(p)
	if err != nil {
		return result(fmt.Errorf("store: profile %s: %w", ProfileKey(p.Model, p.Type), err))
	}
	return s.enqueue(write{bucket: bucketProfiles, key: []byte(ProfileKey(p.Model, p.Type)), value: v})
}

// DeleteProfile forgets the profile of model on typ.
func (s *Store) DeleteProfile(model, typ string) <-chan error {
	return s.enqueue(write{bucket: bucketProfiles, key: []byte(ProfileKey(model, typ))})
}

// result is a channel that yields err.
func result(err error) <-chan error {
	c := make(chan error, 1)
	c <- err
	return c
}

// Load reads everything the database holds. A record that does not decode
// is an error naming its key: the coordinator refuses to start on state
// it cannot read rather than silently dropping a job.
func (s *Store) Load() (*State, error) {
	st := &State{}
	err := s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		st.Counters.LastJob = fromU64(meta.Get(keyLastJob))
		st.Counters.LastNode = fromU64(meta.Get(keyLastNode))
		if v := meta.Get(keyDrained); v != nil {
			if err := json.Unmarshal(v, &st.Drained); err != nil {
				return fmt.Errorf("drained nodes: %w", err)
			}
		}
		if err := loadThrottles(meta.Get(keyThrottles), st); err != nil {
			return err
		}
		err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("job %q: %w", k, err)
			}
			st.Jobs = append(st.Jobs, j)
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketProfiles).ForEach(func(k, v []byte) error {
			var p Profile
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("profile %q: %w", k, err)
			}
			if string(k) != ProfileKey(p.Model, p.Type) {
				return fmt.Errorf("profile %q: the record is of %s", k, ProfileKey(p.Model, p.Type))
			}
			st.Profiles = append(st.Profiles, p)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: load %s: %w", s.path, err)
	}
	sortJobs(st.Jobs)
	return st, nil
}

// loadThrottles reads the throttles' record v (nil: none) into st,
// refusing a share a throttle could not have asked for.
func loadThrottles(v []byte, st *State) error {
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(v, &st.Throttles); err != nil {
		return fmt.Errorf("throttles: %w", err)
	}
	for name, share := range st.Throttles {
		if err := api.CheckCPUShare("cpu_share", share); err != nil {
			return fmt.Errorf("throttles: node %q: %w", name, err)
		}
	}
	return nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func fromU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
