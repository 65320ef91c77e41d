package verify

import (
	"encoding/json"
	"fmt"
	"github.com/kvaudit/kvaudit/side"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/kvaudit/kvaudit/layout"
)

// This file holds what Compare says of pairings that make no sense
// (docs/spec.md §9, "Pairing"): they are likely mistakes of the person
// running it, not transfer faults, so they are notes and hints, never
// verdicts.

// pairByParams gives each consumer request without a producer_id the
// producer request that vLLM's kv_transfer_params.json beside its dumps
// names (remote_request_id), where the dumps of that directory hold one
// request. A producer_id in the manifest wins; a remote_request_id that
// differs from it is said. What it did is added to hints, by consumer
// request id. A kv_transfer_params.json that cannot be read as a regular
// file is an error (readTransferParams).
func pairByParams(cside *side.Source, cons *side.Checks, hints map[string][]string) error {
	params, err := readTransferParams(cside.Dumps)
	if err != nil || len(params) == 0 {
		return err
	}
	ids := map[string][]string{} // directory -> request ids of its dumps
	for _, d := range cside.Dumps {
		dir := filepath.Dir(d.Path)
		for _, r := range d.Manifest.Requests {
			if !slices.Contains(ids[dir], r.ID) {
				ids[dir] = append(ids[dir], r.ID)
			}
		}
	}
	for dir, p := range params {
		if len(ids[dir]) != 1 {
			continue
		}
		for _, r := range cons.Requests {
			switch {
			case r.ID != ids[dir][0]:
			case r.ProducerID == "" && p.RemoteID != r.ID:
				r.ProducerID = p.RemoteID
				hints[r.ID] = append(hints[r.ID], fmt.Sprintf("paired with the producer's request %s by the remote_request_id of %q (vLLM's kv_transfer_params)", termtext.Escape(p.RemoteID), p.File))
			case r.ProducerID != "" && r.ProducerID != p.RemoteID:
				hints[r.ID] = append(hints[r.ID], fmt.Sprintf("paired by the manifest's producer_id %s, though %q names remote_request_id %s", termtext.Escape(r.ProducerID), p.File, termtext.Escape(p.RemoteID)))
			}
		}
	}
	return nil
}

// pairBare picks the consumer request a bare payload is for when the
// consumer holds several: the one whose pairing id is the payload's
// remote_request_id (vLLM's kv_transfer_params). nil when none.
func pairBare(pside *side.Source, cons *side.Checks) *side.RequestChecks {
	if pside.RemoteID() == "" {
		return nil
	}
	var found *side.RequestChecks
	for _, r := range cons.Requests {
		if r.PairID() == pside.RemoteID() || r.ID == pside.RemoteID() {
			if found != nil {
				return nil // ambiguous
			}
			found = r
		}
	}
	return found
}

// notePairing adds to res what in the pairing looks like a mistake: the
// same files on both sides, a producer that looks like a consumer (or the
// other way), a producer request of another length than the load, every
// compared block differing.
func notePairing(res *DiffResult, prod, cons *side.Checks, pside, cside *side.Source) {
	if f, ok := sharedFile(pside.Files(), cside.Files()); ok {
		res.Notes = append(res.Notes, fmt.Sprintf("the producer and the consumer are the same files (%s): a side compared with itself always verifies; give the consumer's own dumps or records", f))
	} else if why := swapped(prod, pside, cside); why != "" {
		res.Notes = append(res.Notes, "are the sides swapped? "+why+": give the producer first, then the consumer")
	}
	compared, differ := 0, 0
	for _, rv := range res.Requests {
		pr := prod.Request(rv.ProducerID)
		cr := cons.Request(rv.ID)
		if pr != nil && cr != nil && pr.NumTokens != cr.NumTokens {
			rv.Hints = append(rv.Hints, fmt.Sprintf("the producer's request %s holds %d tokens, this load %d: is it the request the consumer loaded (another request or prompt)?", termtext.Escape(rv.ProducerID), pr.NumTokens, cr.NumTokens))
		}
		for _, g := range rv.Groups {
			for _, s := range g.Map {
				switch s {
				case PosMismatch:
					compared, differ = compared+1, differ+1
				case PosVerified:
					compared++
				}
			}
		}
	}
	if compared > 1 && differ == compared {
		res.Notes = append(res.Notes, fmt.Sprintf("every compared block differs (%d of %d): that is rarely a transfer fault; are these sides of the same requests, model and seed (or prompt)?", differ, compared))
	}
}

// sharedFile returns a file read by both sides, if any.
func sharedFile(a, b []string) (string, bool) {
	for _, x := range a {
		sx, err := os.Stat(x)
		if err != nil {
			continue
		}
		for _, y := range b {
			if sy, err := os.Stat(y); err == nil && os.SameFile(sx, sy) {
				return fmt.Sprintf("%q", x), true
			}
		}
	}
	return "", false
}

// swapped says why the producer looks like a consumer, or the consumer
// like a producer: a producer request with a local prefix hit or a
// producer_id (a consumer's fields), or files under a directory named
// consumer given as the producer, or under producer as the consumer (as
// kvaudit synth and vLLM's capture connector name them); "" when nothing
// does.
func swapped(prod *side.Checks, pside, cside *side.Source) string {
	if !pside.IsPayload() {
		for _, r := range prod.Requests {
			switch {
			case r.NumLocalComputedTokens > 0:
				return fmt.Sprintf("the producer's request %s has a local prefix hit (%d tokens), as only a consumer's does", termtext.Escape(r.ID), r.NumLocalComputedTokens)
			case r.ProducerID != "" && r.ProducerID != r.ID:
				return fmt.Sprintf("the producer's request %s names a producer_id (%s), as only a consumer's does", termtext.Escape(r.ID), termtext.Escape(r.ProducerID))
			}
		}
	}
	under := func(files []string, name, not string) string {
		for _, f := range files {
			elems := strings.Split(filepath.ToSlash(filepath.Clean(f)), "/")
			if slices.Contains(elems, name) && !slices.Contains(elems, not) {
				return f
			}
		}
		return ""
	}
	if f := under(pside.Files(), "consumer", "producer"); f != "" {
		return fmt.Sprintf("the producer is read from %q, a consumer's directory", f)
	}
	if f := under(cside.Files(), "producer", "consumer"); f != "" {
		return fmt.Sprintf("the consumer is read from %q, a producer's directory", f)
	}
	return ""
}

// transferParams is what a kv_transfer_params.json beside a consumer's
// dumps says of the pairing: the file, and the producer request it names
// (its remote_request_id).
type transferParams struct {
	File     string
	RemoteID string
}

// paramsFile is the name vLLM's capture connector gives the
// kv_transfer_params it writes beside a request's dumps.
const paramsFile = "kv_transfer_params.json"

// maxParamsFile bounds a kv_transfer_params.json read beside dumps.
const maxParamsFile = 1 << 20

// readTransferParams reads the kv_transfer_params.json in each directory
// holding dumps (as vLLM's capture connector writes it beside a request's
// dumps), where there is one, for its remote_request_id: the producer
// request the dumps there load. The result is by directory. A file
// that is not a JSON object, or has no string remote_request_id, says
// nothing (it is the connector's, not kvaudit's input); one that cannot be
// read as a regular file is an error.
func readTransferParams(dumps []*layout.Dump) (map[string]transferParams, error) {
	out := map[string]transferParams{}
	for _, d := range dumps {
		dir := filepath.Dir(d.Path)
		if _, seen := out[dir]; seen {
			continue
		}
		file := filepath.Join(dir, paramsFile)
		if st, err := os.Lstat(file); err != nil || !st.Mode().IsRegular() {
			continue // none, or a link: not followed
		}
		data, err := mapped.ReadRegularFile(file, maxParamsFile, "kv_transfer_params")
		if err != nil {
			return nil, err
		}
		var obj map[string]json.RawMessage
		var id string
		if json.Unmarshal(data, &obj) != nil || json.Unmarshal(obj["remote_request_id"], &id) != nil || id == "" {
			continue
		}
		out[dir] = transferParams{File: file, RemoteID: id}
	}
	return out, nil
}
