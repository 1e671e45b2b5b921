"""Repair: an audit report in; explanations of each failure and verified fixes of the template out.

``explain`` ties a failure to the template lines behind it, ``fixes`` edit the template, ``way_out`` chooses a
setting or a verified fix, ``training_form`` gives the way out's template with generation blocks for trainers (placed
in its own assistant branches where they verify, computed otherwise).
"""
