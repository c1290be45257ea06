import torch

from quadrants.models.tiny import random_tiny_policy, tiny_config


def test_default_config_is_about_a_million_parameters():
    from transformers import Qwen2ForCausalLM

    config = tiny_config(100)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 4, 4)
    assert config.intermediate_size == 512 and config.tie_word_embeddings
    parameters = sum(p.numel() for p in Qwen2ForCausalLM(config).parameters())
    # per layer: attention 4*128*128 + q/k/v biases 384 + MLP 3*128*512 + 2 norms 256 = 262,784;
    # x4 layers = 1,051,136; tied embedding 100*128 = 12,800; final norm 128
    assert parameters == 1_064_064
    # the 256-wide variant the overrides give is 2.65 M
    wide = Qwen2ForCausalLM(tiny_config(100, hidden_size=256))
    assert sum(p.numel() for p in wide.parameters()) == 2_652_416


def test_overrides_replace_defaults():
    config = tiny_config(50, hidden_size=64, num_hidden_layers=1, max_position_embeddings=32)
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (50, 64, 1)
    assert config.max_position_embeddings == 32


def test_random_policy_is_deterministic_in_its_seed():
    first, tokenizer = random_tiny_policy(3)
    second, _ = random_tiny_policy(3)
    other, _ = random_tiny_policy(4)
    assert first.config.vocab_size == len(tokenizer)
    for a, b in zip(first.parameters(), second.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(first.model.embed_tokens.weight, other.model.embed_tokens.weight)


def test_random_policy_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    random_tiny_policy(1, hidden_size=32, num_hidden_layers=1, intermediate_size=64)
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_random_policy_generates_left_padded_batches():
    model, tokenizer = random_tiny_policy(
        0, hidden_size=32, num_hidden_layers=1, intermediate_size=64
    )
    batch = tokenizer(["1+2=", "10+20="], return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=5, do_sample=True, top_k=0)
    assert out.shape[0] == 2 and out.shape[1] <= batch["input_ids"].shape[1] + 5
