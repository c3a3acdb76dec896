"""A hub served from a local folder, and a small byte-level tokenizer, for the loading tests (nothing
reaches the network)."""

from __future__ import annotations

import shutil

COMMIT = "0" * 40


class FakeHub:
    """The hub, served from a local folder: ``config.json`` sits in a hub cache (what transformers reads),
    and ``hf_hub_download`` serves every other file, recording each one asked for."""

    def __init__(self, repo, folder, cache, revisions=("main",)):
        self.repo, self.folder, self.revisions, self.requested = repo, folder, revisions, []
        root = cache / f"models--{repo.replace('/', '--')}"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text(COMMIT)
        (root / "snapshots" / COMMIT).mkdir(parents=True)
        shutil.copy(folder / "config.json", root / "snapshots" / COMMIT / "config.json")
        self.cache = cache

    def __call__(self, repo_id, filename, *args, revision=None, **kwargs):
        from huggingface_hub.utils import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

        self.requested.append(filename)
        if repo_id != self.repo:
            raise http_error(RepositoryNotFoundError, f"no repository {repo_id}")
        if revision not in (None, *self.revisions):
            raise http_error(RevisionNotFoundError, f"Invalid rev id: {revision}")
        path = self.folder / filename
        if not path.exists():
            raise EntryNotFoundError(f"{filename} not found in {repo_id}")
        return str(path)

    def install(self, monkeypatch):
        """Serve ``hf_hub_download``; the reads of transformers (from the cache) learn the revisions too."""
        import huggingface_hub
        import huggingface_hub.constants as hc
        import transformers.utils.hub as thub
        from huggingface_hub.utils import RevisionNotFoundError

        real = thub.hf_hub_download

        def transformers_read(repo_id, filename, *args, revision=None, **kwargs):
            if revision not in (None, *self.revisions):
                raise http_error(RevisionNotFoundError, f"Invalid rev id: {revision}")
            return real(repo_id, filename, *args, revision=revision, **kwargs)

        monkeypatch.setattr(hc, "HF_HUB_CACHE", str(self.cache))
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", self)
        monkeypatch.setattr(thub, "hf_hub_download", transformers_read)
        return self


def http_error(cls, message):
    """A hub HTTP error as the hub client raises it (with a 404 response, whatever the client's release wants)."""
    from types import SimpleNamespace

    response = SimpleNamespace(headers={}, status_code=404, request=None, url="https://huggingface.co")
    return cls(message, response=response)


def byte_tokenizer():
    """A byte-level tokenizer of 257 tokens (every byte, and an end-of-text token): any text encodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", bos_token="<eos>")


def hub_cache(cache, repo, revisions):
    """A hub cache folder laid out as the hub client lays it out, for ``repo`` at each revision of
    ``revisions`` (revision name -> a local model folder): every file stored once in ``blobs`` (named
    by its SHA-256), each revision's ``snapshots/<commit>`` holding relative links to the blobs, and
    ``refs/<revision>`` naming the commit. Returns ``{revision: commit}``."""
    import hashlib
    import os
    from pathlib import Path

    root = Path(cache) / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    commits = {}
    for revision, folder in revisions.items():
        commit = hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
        snapshot = root / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for path in sorted(Path(folder).iterdir()):
            if not path.is_file():
                continue
            data = path.read_bytes()
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.write_bytes(data)
            os.symlink(os.path.relpath(blob, snapshot), snapshot / path.name)
        (root / "refs" / revision).write_text(commit)
        commits[revision] = commit
    return commits


def use_hub_cache(monkeypatch, cache):
    """Point the hub client (and transformers' reads through it) at the hub cache folder ``cache``."""
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
