"""Publishing a release folder on the Hugging Face Hub (``vidspec export --push-to-hub REPO``).

Uses huggingface_hub's ``HfApi``: ``create_repo`` (``exist_ok``), ``create_branch`` for a
``--revision`` other than main, then one ``upload_folder`` commit of the whole folder. The card is
rendered again with the repository id first, so its commands name what users will type.
"""

from __future__ import annotations

import json
from pathlib import Path

from vidspec.decoding.errors import ConfigError


def hub_token(token: str | None = None) -> str:
    """The token to publish with: ``token``, else ``HF_TOKEN`` or the stored login.

    Raises:
        ConfigError: none is available (saying how to provide one).
    """
    if token:
        return token
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise ConfigError("--push-to-hub needs a Hugging Face token with write access: run `hf auth login`, or set "
                          "HF_TOKEN")
    return found


def push_release(folder: str | Path, repo_id: str, *, private: bool = False, revision: str | None = None,
                 token: str | None = None, license: str | None = None) -> str:
    """Upload a release folder to ``repo_id`` and return the commit URL.

    Args:
        folder: a release written by ``vidspec export``.
        repo_id: ``org/name`` on the Hub (created if missing).
        private: create the repository private (an existing repository keeps its visibility).
        revision: a branch to upload to (created from main if missing); None uploads to main.
        token: a write token (default: see :func:`hub_token`).
        license: the card header's license (default: the manifest's).

    Raises:
        ConfigError: no token, a malformed ``repo_id``, or the Hub refused (one line naming the step).
    """
    import huggingface_hub

    from vidspec.draft_training.cards import is_hub_id, release_card

    folder = Path(folder)
    if repo_id.count("/") != 1 or not is_hub_id(repo_id):
        raise ConfigError(f"--push-to-hub {repo_id!r}: give a repository id of the form org/name")
    if not (folder / "manifest.json").is_file():
        raise ConfigError(f"{folder} is not a vidspec release (no manifest.json)")
    api = huggingface_hub.HfApi(token=hub_token(token))
    manifest = json.loads((folder / "manifest.json").read_text())
    card_kw = {"summary": manifest.get("summary"), "repo": repo_id, "license": license}
    release_card(manifest, **card_kw).save(str(folder / "README.md"))
    step = "create_repo"
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        if revision and revision != "main":
            step = "create_branch"
            api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
        step = "upload_folder"
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model", revision=revision,
                                 commit_message=f"vidspec export of {manifest.get('name', folder.name)}")
    except Exception as e:  # HfHubHTTPError, offline mode, network errors: one line naming the step
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--push-to-hub {repo_id}: {step} failed ({type(e).__name__}: {first})") from None
    return str(getattr(info, "commit_url", None) or info)
