(function () {
  var bar = document.getElementById('cite');
  var dir = document.body.getAttribute('data-ledger');
  document.addEventListener('click', function (e) {
    var t = e.target.closest('[data-ev]');
    if (!t) { return; }
    var cmds = t.getAttribute('data-ev').split(' ').map(function (h) {
      return 'ledger --ledger ' + dir + ' show ' + h.slice(0, 12);
    }).join('\n');
    bar.textContent = cmds + '    (' + t.getAttribute('title') + ')';
    bar.hidden = false;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(cmds).catch(function () {});
    }
  });
})();
