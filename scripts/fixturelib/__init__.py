"""What the fixture generators scripts/gen_*.py share (common.py) and the parts of the longer
generators (one module per part, named after its generator). The generators put scripts/ on
sys.path and import from here; they stay the entry points."""
