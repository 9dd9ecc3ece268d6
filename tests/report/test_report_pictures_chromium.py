"""The pictures of the report in a REAL headless Chromium: every crop is an image the browser
decoded (natural size > 0), both confusion matrices are drawn with their look-alike groups, no
console error. The report itself has no script: the check runs in a copy of the page with one
script appended; a screenshot of the pictures section alone is kept under ``artifacts/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from report_pictures import add_pictures
from report_seed import Seeded
from test_report_chromium import _dom, _keep_screenshot

from looper.report import write_html

pytestmark = pytest.mark.e2e

CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('img.crop')];
  const decoded = imgs.filter(i => i.complete && i.naturalWidth >= 256 && i.naturalHeight >= 256).length;
  const drawn = id => { const s = document.getElementById(id); if (!s) return 'none';
    const r = s.getBoundingClientRect();
    return r.width + 'x' + r.height + ':' + s.querySelectorAll('rect.cm').length + ':' + s.querySelectorAll('rect.group').length; };
  const out = document.createElement('pre'); out.id = 'checked';
  out.textContent = 'imgs ' + imgs.length + ' decoded ' + decoded + ' best ' + drawn('confusion-best') + ' delta ' + drawn('confusion-delta');
  document.body.appendChild(out);
});
</script></body>"""


def test_the_crops_decode_and_the_confusion_matrices_are_drawn(seeded: Seeded, tmp_path: Path) -> None:
    add_pictures(seeded.root, seeded.store)
    page = write_html(seeded.store, seeded.root, tmp_path / "report.html")
    assert "<script" not in page.read_text()  # the report itself stays scriptless
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", CHECK))
    dom = _dom(tmp_path, probe)
    m = re.search(r'<pre id="checked">imgs (\d+) decoded (\d+) best ([\d.]+)x([\d.]+):(\d+):(\d+) '
                  r'delta ([\d.]+)x([\d.]+):(\d+):(\d+)</pre>', dom)
    assert m is not None, dom[-3000:]
    imgs, decoded = int(m.group(1)), int(m.group(2))
    assert imgs >= 2 and decoded == imgs  # every crop decoded by the browser
    for w, h, cells, groups in (m.group(3, 4, 5, 6), m.group(7, 8, 9, 10)):
        assert float(w) > 200 and float(h) > 200 and int(cells) >= 5 and int(groups) >= 2
    # for a person: the pictures section alone (the page's own head and CSS), screenshotted
    text = page.read_text()
    section = '<section id="pictures">' + text.split('<section id="pictures">', 1)[1].split("</section>", 1)[0]
    alone = tmp_path / "pictures.html"
    alone.write_text(text.split("<main>", 1)[0] + "<main>" + section + "</section></main></body></html>\n")
    _keep_screenshot(tmp_path, alone, "report_pictures", 4200)
