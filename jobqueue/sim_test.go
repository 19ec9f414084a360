package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentFarmSimulation runs 16 simulated nodes of capacity 6 against
// one queue over 5,000 jobs with random failures, nodes that die for good
// (declared lost by RescueLost), and nodes that die and come straight back
// under the same id (their jobs reclaimed, some results reported late). Every
// job must end completed or failed exactly once, no node may ever hold more
// than its capacity, and no result may be stored twice.
func TestConcurrentFarmSimulation(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 5000
		nodes     = 16
		capacity  = 6
		staleness = 300 * time.Millisecond
	)
	q, pool := newTestQueue(t, Config{Lease: 5 * time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu          sync.Mutex
		completions = map[int64]int{} // successful Complete/CompleteMany per job
		finalFails  = map[int64]int{} // Fail calls that moved a job to failed
		lostNodes   atomic.Int64
		reclaimed   atomic.Int64
		lateAccept  atomic.Int64
		samples     atomic.Int64
		violations  = make(chan string, 16)
		errc        = make(chan error, nodes+4)
	)
	var wg sync.WaitGroup
	goRun := func(name string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		})
	}
	completed := func(id int64) {
		mu.Lock()
		completions[id]++
		mu.Unlock()
	}

	// Wake-ups: one listener for the producer, one shared by the nodes.
	nodeIDs := make([]string, nodes)
	chans := make([]string, nodes)
	byChan := map[string]int{}
	wake := make([]chan struct{}, nodes)
	for i := range nodes {
		nodeIDs[i] = fmt.Sprintf("sim-%02d", i)
		chans[i] = NodeChannel(nodeIDs[i])
		byChan[chans[i]] = i
		wake[i] = make(chan struct{}, 1)
	}
	prodL := NewListener(pool, ListenerConfig{Channels: []string{ChannelProducer}})
	nodeL := NewListener(pool, ListenerConfig{Channels: chans, Buffer: 1024})
	goRun("producer listener", func() error { return prodL.Run(ctx) })
	goRun("node listener", func() error { return nodeL.Run(ctx) })
	goRun("dispatcher", func() error {
		for {
			n, err := nodeL.Wait(ctx)
			if err != nil {
				return nil
			}
			if i, ok := byChan[n.Channel]; ok {
				select {
				case wake[i] <- struct{}{}:
				default:
				}
			}
		}
	})
	<-prodL.Ready()
	<-nodeL.Ready()

	// The capacity sampler: one statement is one snapshot, so what it sees
	// is a state the database was really in.
	goRun("sampler", func() error {
		for ctx.Err() == nil {
			rows, err := pool.Query(ctx, `
                SELECT h.node_id, count(*), min(n.capacity) FROM jobs h JOIN nodes n ON n.id = h.node_id
                WHERE h.state IN ('queued', 'processing') GROUP BY h.node_id HAVING count(*) > min(n.capacity)`)
			if err != nil {
				return err
			}
			for rows.Next() {
				var node string
				var held, capa int
				if err := rows.Scan(&node, &held, &capa); err != nil {
					rows.Close()
					return err
				}
				select {
				case violations <- fmt.Sprintf("node %s held %d jobs, capacity %d", node, held, capa):
				default:
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			samples.Add(1)
		}
		return nil
	})

	// The producer: assign on every wake-up, rescue a few times a second.
	goRun("producer", func() error {
		poll := time.NewTicker(20 * time.Millisecond)
		defer poll.Stop()
		lastRescue := time.Now()
		for {
			if _, err := assignRound(ctx, q, 500); err != nil {
				return err
			}
			if time.Since(lastRescue) > 100*time.Millisecond {
				rep, err := q.RescueLost(ctx, staleness)
				if err != nil {
					return err
				}
				lostNodes.Add(int64(len(rep.LostNodes)))
				lastRescue = time.Now()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-prodL.C():
			case <-poll.C:
			}
		}
	})

	// The nodes stop on nodesStop, once every job is final, and not by
	// ctx: their calls must end with their answers read, or a completion
	// committed as the test ended would be accepted with no caller to count
	// it (a job "accepted 0 times").
	nodesStop, stopNodes := context.WithCancel(context.Background())
	defer stopNodes()
	var nodeWG sync.WaitGroup
	goRunNode := func(name string, f func() error) {
		nodeWG.Add(1)
		goRun(name, func() error {
			defer nodeWG.Done()
			return f()
		})
	}

	// The nodes. Nodes 0-1 die for good after 15 rounds of work; nodes 2-4
	// die after 10 rounds and come straight back under the same id.
	for i := range nodes {
		id := nodeIDs[i]
		goRunNode(id, func() error {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var inc int64
			register := func() error {
				// A node that comes back knows its previous process is gone.
				node, rec, err := q.Register(ctx, NodeInfo{ID: id, Hostname: "sim", Capacity: capacity, Replaces: inc})
				inc = node.Incarnation
				reclaimed.Add(rec.Released + rec.Retried + rec.Failed)
				return err
			}
			if err := register(); err != nil {
				return err
			}
			poll := time.NewTicker(20 * time.Millisecond)
			defer poll.Stop()
			lastBeat := time.Now()
			rounds := 0
			for ctx.Err() == nil && nodesStop.Err() == nil {
				if time.Since(lastBeat) > 50*time.Millisecond {
					st, err := q.Heartbeat(ctx, id, NodeLoad{BusySessions: capacity})
					if err != nil {
						return err
					}
					if st == NodeLost { // declared lost while merely slow
						if err := register(); err != nil {
							return err
						}
					}
					lastBeat = time.Now()
				}
				claimed, err := q.Claim(ctx, id, capacity)
				if err != nil {
					return err
				}
				if len(claimed) == 0 {
					select {
					case <-ctx.Done():
					case <-nodesStop.Done():
					case <-wake[i]:
					case <-poll.C:
					}
					continue
				}
				rounds++
				if i < 2 && rounds == 15 {
					return nil // dies holding its jobs; RescueLost must take them back
				}
				if i >= 2 && i < 5 && rounds == 10 {
					if err := register(); err != nil {
						return err
					}
					// The old process's work on half of them did finish: report it late.
					for _, j := range claimed[:len(claimed)/2] {
						_, err := q.Complete(ctx, j.ID, id, Result{Status: 200, Title: "late"})
						switch {
						case err == nil:
							completed(j.ID)
							lateAccept.Add(1)
						case !errors.Is(err, ErrAlreadyFinished):
							return err
						}
					}
					continue
				}
				var batch []Completion
				for _, j := range claimed {
					switch r := rng.Float64(); {
					case r < 0.08, r < 0.10:
						st, err := q.Fail(ctx, j.ID, id, "simulated failure", "sim", r < 0.08)
						switch {
						case err == nil && st == StateFailed:
							mu.Lock()
							finalFails[j.ID]++
							mu.Unlock()
						case err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrAlreadyFinished):
							return err
						}
					default:
						batch = append(batch, Completion{JobID: j.ID, NodeID: id,
							Result: Result{FinalURL: j.Spec.URL, Status: 200, Title: "ok", Data: []byte(`{"n":1}`)}})
					}
				}
				if i%2 == 0 {
					out, err := q.CompleteMany(ctx, batch)
					if err != nil {
						return err
					}
					for _, o := range out {
						switch {
						case o.Err == nil:
							completed(o.JobID)
						case !errors.Is(o.Err, ErrAlreadyFinished):
							return o.Err
						}
					}
				} else {
					for _, c := range batch {
						_, err := q.Complete(ctx, c.JobID, id, c.Result)
						switch {
						case err == nil:
							completed(c.JobID)
						case !errors.Is(err, ErrAlreadyFinished):
							return err
						}
					}
				}
			}
			return nil
		})
	}

	for off := 0; off < jobs; off += 1000 {
		mustEnqueue(t, q, pageSpecs(1000, fmt.Sprintf("sim%d.test", off))...)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var live int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM jobs WHERE state NOT IN ('completed', 'failed')").Scan(&live); err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatal(err)
		}
		if live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still live after 60 s", live)
		}
		select {
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopNodes()
	nodeWG.Wait()
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	close(violations)
	for v := range violations {
		t.Error("capacity violated:", v)
	}

	bg := context.Background()
	var total, done, failed, results, distinctResults, resultsOfFailed int64
	err := pool.QueryRow(bg, `
        SELECT count(*), count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'failed'),
               (SELECT count(*) FROM results), (SELECT count(DISTINCT job_id) FROM results),
               (SELECT count(*) FROM results r JOIN jobs j ON j.id = r.job_id WHERE j.state <> 'completed')
        FROM jobs`).Scan(&total, &done, &failed, &results, &distinctResults, &resultsOfFailed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs %d: completed %d, failed %d; nodes declared lost %d, jobs reclaimed by restarted nodes %d, late results accepted %d; %d capacity samples",
		total, done, failed, lostNodes.Load(), reclaimed.Load(), lateAccept.Load(), samples.Load())
	if total != jobs || done+failed != jobs {
		t.Fatalf("%d jobs, %d completed + %d failed", total, done, failed)
	}
	if results != done || distinctResults != results || resultsOfFailed != 0 {
		t.Fatalf("results %d (distinct %d, of unfinished or failed jobs %d) for %d completed jobs", results, distinctResults, resultsOfFailed, done)
	}
	if samples.Load() == 0 {
		t.Fatal("the capacity sampler never ran")
	}
	if lostNodes.Load() < 2 || reclaimed.Load() == 0 {
		t.Fatalf("the scenario did not exercise loss and restart: lost %d, reclaimed %d", lostNodes.Load(), reclaimed.Load())
	}
	// Exactly once, as seen by the callers: each completed job was accepted
	// once, and no failed job was ever accepted as completed.
	rows, err := pool.Query(bg, "SELECT id, state, coalesce(error_class, '') FROM jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	mu.Lock()
	defer mu.Unlock()
	for rows.Next() {
		var id int64
		var st State
		var class string
		if err := rows.Scan(&id, &st, &class); err != nil {
			t.Fatal(err)
		}
		switch st {
		case StateCompleted:
			if completions[id] != 1 {
				t.Errorf("completed job %d was accepted %d times", id, completions[id])
			}
		case StateFailed:
			if completions[id] != 0 {
				t.Errorf("failed job %d was also accepted as completed", id)
			}
			if finalFails[id] > 1 || (finalFails[id] == 0 && class == "sim") {
				t.Errorf("failed job %d: %d final Fail calls, class %q", id, finalFails[id], class)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
