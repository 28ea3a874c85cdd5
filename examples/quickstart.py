from attention_atlas import AtlasClient, run_model, show

minilm = "sentence-transformers/all-MiniLM-L6-v2"  # both embedded: no download, no network
smollm2 = "HuggingFaceTB/SmolLM2-135M-Instruct"  # (converted from its GGUF on first use, ~10 s)

run = run_model(minilm, "The cat sat on the mat.")  # an id, a folder, or a model object
print(run.tokens)  # ['[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '.', '[SEP]']
print(run.attentions.shape)  # (layers, heads, tokens, tokens): torch.Size([6, 12, 9, 9])
decoder = run_model(smollm2, "One, two, three, four")
print(decoder.causal, decoder.num_kv_heads)  # True 3: 9 query heads share 3 key/value heads
show(run)  # in a notebook: the explorer's views, inline

# With the server running (`make run`): answers as numpy arrays, no torch needed
server = "http://127.0.0.1:8000"  # make run's address; another port after `make run PORT=...`
atlas = AtlasClient(server)
maps = atlas.attention(minilm, "The cat sat.", format="u8")
print(maps.weights.shape, maps.error_bound)  # (6, 12, 6, 6) 0.00196...: u8's bound, 1/510
print(maps.timing)  # where the server's time went, ms: {'app': 10.6, ..., 'forward': 8.0}
heads = atlas.heads(smollm2, atlas.induction_text(smollm2, length=20))
print(heads.strongest("induction", 3))  # [(layer, head, score), ...]: its induction heads
for line in atlas.generate(smollm2, "The capital of France is", max_new_tokens=2):
    print(line["token"] if line["event"] == "token" else repr(line["text"]))  # each as it comes
