package verify

import (
	"fmt"
	"github.com/kvaudit/kvaudit/side"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// noProducerHint says why a consumer request found no producer request.
func noProducerHint(producer *side.Checks, cr *side.RequestChecks) string {
	if producer == nil || len(producer.Requests) == 0 {
		return "the producer side holds no request"
	}
	var ids []string
	for _, r := range producer.Requests {
		if r.ID != "" {
			ids = append(ids, r.ID)
		}
		if len(ids) == 3 {
			break
		}
	}
	return fmt.Sprintf("no producer request has id %q (the producer has %q%s); real P/D deployments rename requests: pair them with the consumer's producer_id, or name the request with --request", cr.PairID(), ids, map[bool]string{true: ", ...", false: ""}[len(producer.Requests) > 3])
}

// flatFingerprintHint says why a flat payload's fingerprint differs
// (refineFlatHints names the producer's block size where it can).
func flatFingerprintHint(consumerBlockSize int) string {
	return fmt.Sprintf("the flat form's fingerprint includes the block size (consumer %d): a producer with another block size gives another one, and so do other layers, spec types or dtypes; %s", consumerBlockSize, flatTail)
}

const flatTail = "the flat form cannot compare different block sizes, the nested form and records can"

// refineFlatHints names the producer's block size in the hint of every
// group whose flat payload fingerprint differs only by the block size:
// the consumer's layers (its dumps, every PP stage) give the producer's
// fingerprint at that block size.
func refineFlatHints(res *DiffResult, producer *side.Checks, consumer []*layout.Dump) {
	for _, rv := range res.Requests {
		pr := producer.Request(rv.ProducerID)
		if pr == nil {
			continue
		}
		for _, gv := range rv.Groups {
			pg := pr.Group(gv.ID)
			if gv.Reason != ReasonFingerprint || pg == nil || !pg.FlatOnly || pg.BadFingerprint {
				continue
			}
			if bs, ok := probeFlatBlockSize(consumer, gv.ID, gv.BlockSize, pg.FingerprintFlat); ok {
				gv.Hint = fmt.Sprintf("block size: producer %d, consumer %d (the same layers and dtypes otherwise); %s", bs, gv.BlockSize, flatTail)
			}
		}
	}
}

// probeFlatBlockSize returns the block size (1..1024, powers of two to
// 2^20) at which the group's flat fingerprint over the dumps (one TP rank
// per PP stage) equals fp.
func probeFlatBlockSize(dumps []*layout.Dump, id, have int, fp uint64) (int, bool) {
	var views []*layout.GroupView
	stages := map[int]bool{}
	for _, d := range dumps {
		pp := d.Manifest.Parallel.PPRank
		if stages[pp] {
			continue
		}
		for _, g := range d.Groups {
			if g.Group.ID == id {
				stages[pp] = true
				views = append(views, g)
			}
		}
	}
	if len(views) == 0 {
		return 0, false
	}
	try := func(bs int) bool {
		var sum uint64
		for _, g := range views {
			sum += checksum.FlatFingerprintAt(g, bs)
		}
		return sum == fp
	}
	for bs := 1; bs <= 1<<20; {
		if bs != have && try(bs) {
			return bs, true
		}
		if bs < 1024 {
			bs++
		} else {
			bs *= 2
		}
	}
	return 0, false
}
