"""The amdgpu engine's own command encoders: PM4 (:mod:`.pm4`), SDMA (:mod:`.sdma`) and
AQL (:mod:`.aql`). Pure functions from arguments to words, tested against literal
words; they share nothing with the simulated Strix Halo that interprets them."""
