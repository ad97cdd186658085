"""The HTML template `dvc plots show` fills, with Vega, Vega-Lite and Vega-Embed inlined.

DVC's own page loads them from a CDN, so offline it stays blank. vl-convert-python ships
the three libraries; `python -m pipeline plots-template` (run by `make setup`) writes the
template to the path `.dvc/config` names (`plots.html_template`, relative to `.dvc/`).
The template has no `{scripts}` placeholder, so DVC adds no CDN script tags.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.io import write_text

# Vega-Lite major version of DVC's renderer (dvc-render's templates are v5 specs).
VEGA_LITE = "5.21"

PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
{{refresh_tag}}
<title>DVC plots</title>
<!-- Vega {vega}, Vega-Lite {vega_lite}, Vega-Embed {embed}, bundled by vl-convert-python {vlc} -->
<script>
{bundle}
</script>
<style>
body {{ font-family: sans-serif; margin: 1em 2em; }}
table {{ border-spacing: 15px; }}
</style>
</head>
<body>
{{plot_divs}}
</body>
</html>
"""


def template_path(repo: Path) -> Path:
    """Where `.dvc/config` says the template is (relative paths are to `.dvc/`)."""
    from dvc.config import Config

    name = Config(dvc_dir=str(repo / ".dvc")).get("plots", {}).get("html_template")
    if not name:
        raise ConfigError(f"{repo / '.dvc' / 'config'}: no plots.html_template; expected the offline template's path")
    path = Path(name)
    return path if path.is_absolute() else repo / ".dvc" / path


def page() -> str:
    import vl_convert as vlc

    bundle = vlc.javascript_bundle(vl_version=VEGA_LITE)
    if "</script" in bundle or "{plot_divs}" in bundle or "{scripts}" in bundle:
        raise RuntimeError("the Vega bundle holds text the HTML template cannot embed as is")
    return PAGE.format(vega=vlc.get_vega_version(), vega_lite=VEGA_LITE, embed=vlc.get_vega_embed_version(),
                       vlc=vlc.__version__, bundle=bundle)


def write_template(repo: Path) -> Path:
    path = template_path(repo)
    write_text(path, page())
    return path
