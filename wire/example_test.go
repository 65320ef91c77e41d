package wire_test

import (
	"fmt"

	"github.com/kvaudit/kvaudit/wire"
)

// What a producer sends for a 40-token request in vLLM's flat form, and
// what a consumer decodes from it: the text goes in
// kv_transfer_params["kv_checksums"].
func ExampleDecodePayloadBase64() {
	text, err := wire.EncodePayloadBase64(&wire.Payload{Form: wire.FormFlat, NumTokens: 40, Groups: []wire.PayloadGroup{
		{ID: 0, Fingerprint: 0x98a2d0d44656097b, Values: []uint64{0xbcc6295bacdf458f, 0x28dab35efd2b229a, 0xee0c3f0e665468f5}},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println(text)
	p, err := wire.DecodePayloadBase64(text)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s form, %d tokens, group %d from position %d: %x\n", p.Form, p.NumTokens, p.Groups[0].ID, p.Groups[0].Start, p.Groups[0].Values)
	// Output:
	// kwEokZQAz5ii0NRGVgl7AMQYj0XfrFspxryaIiv9XrPaKPVoVGYOPwzu
	// flat form, 40 tokens, group 0 from position 0: [bcc6295bacdf458f 28dab35efd2b229a ee0c3f0e665468f5]
}
