"""A character-level tokenizer for the embedded tiny model.

Built with the `tokenizers` library as a BPE model with an explicit vocabulary and no merges (so
every character is one token) and a `Fuse` decoder (so decoding concatenates characters back), then
wrapped in `transformers.PreTrainedTokenizerFast`. It saves and reloads with
`AutoTokenizer.from_pretrained(dir)` with no network. The vocabulary is the printable ASCII range
plus newline, so any ASCII text round-trips: `decode(encode(s)) == s`. No BOS is added to inputs
(as with Qwen tokenizers); padding is on the left, for batched generation.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
# Printable ASCII (digits, operators, '=', ',', space, '\boxed{}', letters, ...) and newline.
CHARACTERS = "\n" + "".join(chr(code) for code in range(32, 127))


def char_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer: ids 0-3 are <pad>, <bos>, <eos>, <unk>, then
    one id per character."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + tuple(CHARACTERS))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    return tokenizer
