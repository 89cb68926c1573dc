"""Campaign files: the user's TOML (:mod:`arenad.campaign.load` documents the format and
every limit), and the instance files it names (:mod:`arenad.campaign.instances`)."""

from arenad.campaign.load import Campaign, load_campaign, render_verify_template, spec_sha256

__all__ = ["Campaign", "load_campaign", "render_verify_template", "spec_sha256"]
