"""The ``xdna`` engine: the Strix Halo NPU5 (AIE2P) through libamdf.

* :mod:`.image` reads ``.xdna`` executable images (the format HRX's compiler writes,
  :mod:`.format`) and checks every rule of the format; :mod:`.qualify` checks an
  entry against the device and the program's ``KernelContract`` before any device
  memory is touched; :mod:`.transaction` lowers it to the AIE transaction each
  invocation submits.
* :mod:`.engine` is the engine and its device; :mod:`.program` a loaded program
  (hardware context, instruction ring, kernel queue); :mod:`.queue` the hrx queues;
  :mod:`.retire` retirement through eventfd notifications and status reads;
  :mod:`.memory` NPU memory, its cache maintenance and imports of other engines'
  provider memory.
* On the simulated Strix Halo (``HRX_AMDF_PROVIDER=fake``) programs run through
  their host builds (:mod:`.simulation`); npu-host programs load through stand-in
  images (:mod:`.writer`). Nothing here has run on an NPU yet (docs/npu.md).
"""

from .artifact import ENV_IMAGES, TARGET, XdnaCode, contract_of, image_artifact
from .image import XdnaImage, XdnaImageError, read_image

__all__ = ["ENV_IMAGES", "TARGET", "XdnaCode", "XdnaImage", "XdnaImageError", "contract_of", "image_artifact", "read_image"]
